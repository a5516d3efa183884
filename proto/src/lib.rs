//! Every message of mpicr: the control protocol between a rank's keeper (`mpicr run`/`mpicr
//! restart`) and the agent thread inside `libmpicr.so` (this module), the coordinator's
//! messages, handshake and authenticated frames ([`coord`]), and the one framing all of them
//! use, descriptor passing included ([`frame`]).
//!
//! Transport: a `SOCK_STREAM` unix socketpair created by the keeper. The program's end is passed
//! as the fd number in the environment variable [`CTL_FD_ENV`]. Each message is one frame: a
//! little-endian `u32` byte length followed by the `postcard` encoding of the message.
//!
//! One checkpoint, as seen on one control connection (K = keeper, A = agent):
//! ```text
//! A->K Hello                      once, after the program's MPI_Init
//! K->A Checkpoint{epoch,..}       start (or A->K Request first, when the program asks)
//! A->K Counters                   collective counters per communicator
//! K->A Targets{round}             maximum over the members (from the coordinator)
//! A->K Wants                      (while not aligned) collectives past a target that a
//!                                 program thread waits to start; the coordinator raises
//!                                 those targets: K->A Targets{round+1} to every rank
//! A->K SendCounts{round}          gates closed, collectives aligned: messages sent per peer,
//!                                 and the counts of communicators made without a target
//!                                 (a later Targets reopens the gate: align again, resend;
//!                                 the coordinator sends one when a rank is behind on such a
//!                                 communicator)
//! K->A ExpectedRecvs              what every peer sent to this rank
//! A->K Drained                    in-flight messages drained; the library is still running
//! K->A Release                    every rank drained (job-wide barrier)
//! A->K ReadyToDump                lower half released, shim.state written
//! K->A Resume{restarted}          after the dump (continue), or after a restore (restart)
//! A->K Resumed                    lower half renewed, objects rebuilt, gates open
//! ```
//! Any step may be answered by `Failed{reason}`, which aborts the checkpoint on every rank; the
//! agent then renews (if it released) and continues as if nothing had been requested.
//! Releasing and renewing are collective (MPI_Finalize, MPI_Init), so either every rank releases
//! or none does: no rank releases before `Release`, which the coordinator sends once every rank
//! said `Drained`. After `Drained` an agent therefore never gives up alone: when its wait for
//! `Release` runs out it says `Failed` and waits for the verdict (`Release`, or `Abort`). Every
//! other wait of the agent has a deadline; on it the agent says `Failed` and recovers.
//!
//! Lower-half renewal and PMI (added for the keeper's PMI relay; optional for the agent):
//! ```text
//! A->K PmiConnect{generation}     + SCM_RIGHTS: one end of a fresh socketpair; the agent
//!                                 installs the other end at the number in PMI_FD, then the
//!                                 renewed MPI library's PMI client talks to the keeper on it
//! ```
//! Incremental dumps without soft-dirty bits (when the keeper set [`WRITE_TRACK_ENV`]):
//! ```text
//! A->K WriteTracker{error}        + SCM_RIGHTS: the program's userfaultfd (async write-protect),
//!                                 after Hello and after each restore; none with `error`
//! ```
//!
//! The keeper relays the program's PMI traffic to the launcher, answering `finalize` itself and
//! prefixing keys per generation (`g<G>-` for G >= 1). Generation 0 is the program's first
//! `MPI_Init`. Without `PmiConnect`, the keeper counts `init` commands on the PMI socket it
//! handed out; that covers libraries that keep the socket open across finalize (MPICH 5.x).
//! MPICH 4.0.2 shuts the socket down in `PMI_Finalize`, so a renewal there needs `PmiConnect`,
//! sent with [`send_with_fd`], before the new `MPI_Init`. After a restart the program's PMI
//! socket (if it still held one) and control socket are new ones at the same numbers.

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};

pub mod coord;
pub mod frame;

pub use frame::{FrameError, Received, MAX_FRAME};

/// Environment variable naming the program's end of the control socketpair.
pub const CTL_FD_ENV: &str = "MPICR_CTL_FD";

/// A communicator's job-wide identity: equal on every member, whatever its local handle.
pub type CommGid = u64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub rank: i32,
    pub size: i32,
    pub pid: u32,
    /// Path of the real MPI library underneath.
    pub library: String,
    /// `sessions` or `namespace`.
    pub renew_strategy: String,
    /// Lower-half renewals still possible in this process (None: unbounded).
    pub renewals_left: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// Microseconds spent per phase, in protocol order.
    pub phases_us: Vec<(String, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToAgent {
    /// Begin a checkpoint. `state_path` is where the agent writes `shim.state`.
    Checkpoint { epoch: u64, stop: bool, state_path: String },
    /// Collective targets: the maximum counter over the members of each communicator, raised
    /// in later rounds where a rank needed more (`FromAgent::Wants`). Every communicator the
    /// coordinator knows of, members or not; a round replaces the previous one. `groups`: the
    /// targets of the `MPI_Comm_create_group` keys (see `FromAgent::Counters`) this rank is a
    /// member of, whether it has called that yet or not: it must run on until it started as
    /// many (a member blocked in the call waits for it).
    Targets { round: u32, comms: Vec<(CommGid, u64)>, groups: Vec<(CommGid, u64)> },
    /// Per communicator and source world rank, how many messages were sent to this rank.
    ExpectedRecvs { expect: Vec<(CommGid, i32, u64)> },
    /// The dump is done (`restarted: false`) or this process was just restored from the image
    /// of `epoch` (`restarted: true`). Renew the lower half and continue. `env`: settings of the
    /// MPI library for the launch the process now runs in, applied to the process environment
    /// before the renewal (`Some`: set, `None`: unset); empty when nothing changes.
    Resume { restarted: bool, epoch: u64, size: i32, env: Vec<(String, Option<String>)> },
    /// Abort the checkpoint in progress.
    Abort { reason: String },
    /// Every rank drained: release the lower half now (after `Drained`).
    Release,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromAgent {
    Hello(Hello),
    /// The program asked for a checkpoint through the C API.
    Request {
        stop: bool,
    },
    /// Collectives started so far, per communicator. `MPI_Comm_create_group`, collective over
    /// its group only, is counted apart per key (parent, tag, group): its starts are among
    /// `comms` under the key, and `groups` names the members (world ranks) of each key that
    /// has a call in progress here, so that the members that have not called it yet get a
    /// target too.
    Counters {
        comms: Vec<(CommGid, u64)>,
        groups: Vec<(CommGid, Vec<i32>)>,
    },
    /// Gates closed at the aligned cut of targets `round`; messages sent per communicator and
    /// destination world rank. `untold`: the collective counts of the communicators this rank
    /// made after reporting its counters and was given no target for (its peers may be further
    /// on them: the coordinator then raises them, a new round).
    SendCounts {
        round: u32,
        sent: Vec<(CommGid, i32, u64)>,
        untold: Vec<(CommGid, u64)>,
    },
    /// Not aligned yet, and a program thread waits to start collective number `n` on `comm`,
    /// past its target: this rank cannot reach its targets without it (one rank ran ahead
    /// through collectives it could finish alone, such as a broadcast's root). `groups`: the
    /// members of the `MPI_Comm_create_group` keys among them (see `Counters`).
    Wants {
        comms: Vec<(CommGid, u64)>,
        groups: Vec<(CommGid, Vec<i32>)>,
    },
    /// In-flight messages drained, lower half released, state written.
    ReadyToDump {
        drained_msgs: u64,
        drained_bytes: u64,
        state_bytes: u64,
        timings: Timings,
    },
    /// Running again after `Resume`.
    Resumed {
        timings: Timings,
    },
    /// The checkpoint cannot be taken (e.g. an open MPI file); the job keeps running.
    Failed {
        reason: String,
    },
    /// A new PMI connection for lower-half generation `generation` (the first `MPI_Init` is
    /// generation 0). Sent with [`send_with_fd`]: the frame carries the keeper's end of a fresh
    /// socketpair; the agent installs the other end at the descriptor number named by `PMI_FD`.
    PmiConnect {
        generation: u32,
    },
    /// In-flight messages drained, the library still running: waits for `Release`.
    Drained,
    /// Answer to [`WRITE_TRACK_ENV`] (`--incremental` without soft-dirty bits), after `Hello`
    /// and again after each restore: a userfaultfd of this process in asynchronous
    /// write-protect mode, sent with [`send_with_fd`] (the agent closes its copy: the keeper's
    /// keeps the context alive, out of the images). `error`: why there is none (no descriptor).
    WriteTracker {
        error: Option<String>,
    },
}

/// Environment variable the keeper sets when the agent is to send [`FromAgent::WriteTracker`].
pub const WRITE_TRACK_ENV: &str = "MPICR_WRITE_TRACK";

/// Writes one frame.
pub fn send<W: Write, M: Serialize>(w: &mut W, msg: &M) -> io::Result<()> {
    Ok(frame::write_msg(w, msg)?)
}

/// Writes one frame on a socket with `MSG_NOSIGNAL`: a peer that went away is an `EPIPE`
/// error, never a SIGPIPE (which would kill a C program that did not ignore it; the agent lives
/// in such programs).
pub fn send_on<M: Serialize>(sock: &std::os::unix::net::UnixStream, msg: &M) -> io::Result<()> {
    use std::os::fd::AsFd;
    Ok(frame::send_msg(sock.as_fd(), msg, &[])?)
}

/// Reads one frame; `Ok(None)` on a clean end of stream before the frame started.
pub fn recv<R: Read, M: for<'de> Deserialize<'de>>(r: &mut R) -> io::Result<Option<M>> {
    Ok(frame::read_msg(r)?)
}

/// Decodes the body of one frame (without its length).
pub fn decode_body<M: for<'de> Deserialize<'de>>(body: &[u8]) -> io::Result<M> {
    Ok(frame::decode(body)?)
}

/// Writes one frame on a unix socket with `fd` attached as `SCM_RIGHTS` ancillary data (used
/// for [`FromAgent::PmiConnect`]). The caller may close its copy of `fd` afterwards.
pub fn send_with_fd<M: Serialize>(sock: &std::os::unix::net::UnixStream, msg: &M, fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsFd;
    Ok(frame::send_msg(sock.as_fd(), msg, &[fd])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let msgs =
            vec![FromAgent::Counters { comms: vec![(7, 3), (9, 0)], groups: vec![(9, vec![0, 2])] }, FromAgent::Failed { reason: "open MPI file".into() }];
        let mut buf = Vec::new();
        for m in &msgs {
            send(&mut buf, m).unwrap();
        }
        let mut rd = &buf[..];
        for m in &msgs {
            let got: FromAgent = recv(&mut rd).unwrap().unwrap();
            assert_eq!(&got, m);
        }
        assert!(recv::<_, FromAgent>(&mut rd).unwrap().is_none());
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn config() -> ProptestConfig {
            // PROPTEST_CASES=100000 for a long run; a quick one by default.
            let mut c = ProptestConfig::default();
            if std::env::var_os("PROPTEST_CASES").is_none() {
                c.cases = 256;
            }
            c.failure_persistence = None;
            c
        }

        fn samples() -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            let to_agent = [
                ToAgent::Checkpoint { epoch: 3, stop: true, state_path: "/x/shim.state".into() },
                ToAgent::Targets { round: 1, comms: vec![(1, 2), (u64::MAX, 0)], groups: vec![(5, 1)] },
                ToAgent::ExpectedRecvs { expect: vec![(7, -1, 9)] },
                ToAgent::Resume { restarted: true, epoch: 1, size: 4, env: vec![("UCX_TLS".into(), None)] },
                ToAgent::Abort { reason: "r".into() },
                ToAgent::Release,
            ];
            for m in &to_agent {
                let mut b = Vec::new();
                send(&mut b, m).unwrap();
                out.push(b);
            }
            let from_agent = [
                FromAgent::Hello(Hello { rank: 0, size: 2, pid: 9, library: "l".into(), renew_strategy: "s".into(), renewals_left: Some(3) }),
                FromAgent::ReadyToDump { drained_msgs: 1, drained_bytes: 2, state_bytes: 3, timings: Timings { phases_us: vec![("a".into(), 1)] } },
                FromAgent::PmiConnect { generation: 2 },
                FromAgent::Drained,
            ];
            for m in &from_agent {
                let mut b = Vec::new();
                send(&mut b, m).unwrap();
                out.push(b);
            }
            out
        }

        /// Replaces, inserts, deletes bytes or truncates, at places chosen by the strategy.
        pub fn mutate(mut b: Vec<u8>, ops: &[(prop::sample::Index, u8, u8)]) -> Vec<u8> {
            for (at, byte, op) in ops {
                match op % 4 {
                    0 if !b.is_empty() => {
                        let i = at.index(b.len());
                        b[i] = *byte;
                    }
                    1 => {
                        let i = at.index(b.len() + 1);
                        b.insert(i, *byte);
                    }
                    2 if !b.is_empty() => {
                        let i = at.index(b.len());
                        b.remove(i);
                    }
                    _ => {
                        let i = at.index(b.len() + 1);
                        b.truncate(i);
                    }
                }
            }
            b
        }

        fn decode_all(bytes: &[u8]) {
            let mut r = bytes;
            for _ in 0..64 {
                match recv::<_, ToAgent>(&mut r) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        assert!(!e.to_string().is_empty() && !e.to_string().contains('\n'));
                        break;
                    }
                }
            }
            let mut r = bytes;
            let _ = recv::<_, FromAgent>(&mut r);
        }

        proptest! {
            #![proptest_config(config())]

            #[test]
            fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
                decode_all(&bytes);
            }

            #[test]
            fn mutated_frames_never_panic(
                which in any::<prop::sample::Index>(),
                ops in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), any::<u8>()), 1..6),
            ) {
                let s = samples();
                let base = s[which.index(s.len())].clone();
                decode_all(&mutate(base, &ops));
            }
        }

        #[test]
        fn hostile_length_allocates_nothing_big() {
            let mut buf = (MAX_FRAME - 1).to_le_bytes().to_vec();
            buf.extend_from_slice(&[1, 2, 3]);
            let e = recv::<_, ToAgent>(&mut &buf[..]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn send_on_a_closed_peer_is_epipe_not_sigpipe() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(b);
        // The test harness (a Rust binary) ignores SIGPIPE anyway; make it fatal as in a C
        // program, so a send without MSG_NOSIGNAL would end this test process.
        // SAFETY: restoring the default action of SIGPIPE; nothing else in this test binary
        // writes to broken pipes.
        let old = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let e = send_on(&a, &FromAgent::Drained).unwrap_err();
        let (x, _y) = std::os::unix::net::UnixStream::pair().unwrap();
        use std::os::fd::AsFd;
        let e2 = send_with_fd(&a, &FromAgent::PmiConnect { generation: 1 }, x.as_fd()).unwrap_err();
        // SAFETY: putting the previous action back.
        unsafe { libc::signal(libc::SIGPIPE, old) };
        assert_eq!(e.raw_os_error(), Some(libc::EPIPE));
        assert_eq!(e2.raw_os_error(), Some(libc::EPIPE));
    }

    #[test]
    fn oversized_frame_is_refused() {
        let mut buf = (MAX_FRAME + 1).to_le_bytes().to_vec();
        buf.extend_from_slice(&[0; 8]);
        let err = recv::<_, ToAgent>(&mut &buf[..]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
