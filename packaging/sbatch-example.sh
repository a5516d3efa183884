#!/bin/bash
# A batch job that outlives its time limit: submit it once (`sbatch mpicr-job.sh`) and leave it.
# Each allocation runs the program under mpicr; 5 minutes before the limit mpicr checkpoints
# and stops it, and the script submits itself again; the next allocation resumes from the
# latest epoch (`--resume-if-any`), and once the program has ended (mpicr writes ckpt/ENDED)
# nothing is submitted any more. The script never changes between allocations.
#
#SBATCH --job-name=mpicr-job
#SBATCH --ntasks=64
#SBATCH --time=12:00:00
#SBATCH --open-mode=append
#SBATCH --output=mpicr-job.out
set -u
ck=$SLURM_SUBMIT_DIR/ckpt

# --stop-before reads the time left from Slurm (squeue) when the job starts; give the
# checkpoint enough time to be written (see `mpicr status ckpt` for the last one's duration).
srun --mpi=pmi2 mpicr run --resume-if-any --stop-before 5m --ckpt-dir "$ck" -- ./sim input.dat

# Stopped for the time limit (the program has not ended): the next job resumes it. afterany:
# it starts once this one has ended, so that two allocations never run the job at once.
if [ ! -e "$ck/ENDED" ]; then
    sbatch --dependency=afterany:"$SLURM_JOB_ID" "$SLURM_SUBMIT_DIR/mpicr-job.sh"
fi

# Variants:
# - A program linked to Open MPI: srun --mpi=pmix (Open MPI talks PMIx to Slurm; pmi2 serves
#   MPICH-ABI libraries).
# - Requeue instead of a new job: `#SBATCH --requeue`, and `scontrol requeue "$SLURM_JOB_ID"`
#   in place of the sbatch line (Slurm holds a requeued job for about two minutes before it is
#   eligible again; $SLURM_RESTART_COUNT counts the allocations).
# - Let Slurm signal the script instead of --stop-before (`#SBATCH --signal=B:USR1@300`), and
#   stop the job from a trap; run srun in the background so that the trap runs at once:
#       trap 'mpicr checkpoint --stop --wait "$ck"' USR1
#       srun --mpi=pmi2 mpicr run --resume-if-any --ckpt-dir "$ck" -- ./sim input.dat &
#       wait; wait
# - Periodic checkpoints on top (a node failure loses at most that much): --interval 1h.
