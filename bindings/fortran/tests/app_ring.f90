! mpicr's Fortran module: the first NAPPLES ranks are application-level (`mpicr run --mode app`),
! the others transparent. A ring of messages sent one iteration ahead (in flight at every safe
! point), an MPI_Allreduce on a duplicate of MPI_COMM_WORLD kept across a restart as its handle.
! Arguments: ITERS PACE_US NAPPLES. Output: deterministic checksums.
module ring_state
  use, intrinsic :: iso_c_binding
  use mpicr
  implicit none
  integer :: it = 0, comm = 0
  integer(8) :: s = 0
contains
  integer(c_int) function save(dir, arg) bind(c)
    character(kind=c_char), dimension(*), intent(in) :: dir
    type(c_ptr), value :: arg
    integer :: u, ios
    open(newunit=u, file=mpicr_dir(dir) // '/state.txt', status='replace', action='write', iostat=ios)
    save = ios
    if (ios /= 0) return
    write(u, *) it, comm, s
    close(u)
  end function save

  integer(c_int) function restore(dir, arg) bind(c)
    character(kind=c_char), dimension(*), intent(in) :: dir
    type(c_ptr), value :: arg
    integer :: u, ios
    open(newunit=u, file=mpicr_dir(dir) // '/state.txt', status='old', action='read', iostat=ios)
    restore = ios
    if (ios /= 0) return
    read(u, *, iostat=ios) it, comm, s
    restore = ios
    close(u)
  end function restore
end module ring_state

program app_ring
  use mpi
  use mpicr
  use ring_state
  implicit none
  integer :: ierr, rank, size, left, right, iters, pace, napples, rc
  integer(8) :: m, total, x
  character(len=32) :: a
  integer(8), parameter :: big = 2305843009213693951_8

  call get_command_argument(1, a); read(a, *) iters
  call get_command_argument(2, a); read(a, *) pace
  call get_command_argument(3, a); read(a, *) napples
  rc = mpicr_app_register(save, restore)
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  right = mod(rank + 1, size)
  left = mod(rank + size - 1, size)
  if (mpicr_restarted() == 0) then
    write(*, '(a,i0,a,i0)') 'app_ring: rank ', rank, ' of ', size
    flush(6)
    call MPI_Comm_dup(MPI_COMM_WORLD, comm, ierr)
    s = int(rank, 8) * 1000003_8 + 7_8
    it = 0
    m = mod(s, 9973_8)
    call MPI_Send(m, 1, MPI_INTEGER8, right, 0, comm, ierr)
  end if
  do while (it < iters)
    if (rank < napples) rc = mpicr_safe_point()
    if (pace > 0) call sleep_us(pace)
    call MPI_Recv(m, 1, MPI_INTEGER8, left, it, comm, MPI_STATUS_IGNORE, ierr)
    s = mod(mod(s, 1000003_8) * 31_8 + m + int(it, 8), big)
    x = mod(s, 65521_8)
    call MPI_Allreduce(x, total, 1, MPI_INTEGER8, MPI_SUM, comm, ierr)
    s = ieor(s, total)
    if (it + 1 < iters) then
      m = mod(s, 9973_8)
      call MPI_Send(m, 1, MPI_INTEGER8, right, it + 1, comm, ierr)
    end if
    if (mod(it, 10) == 9) then
      write(*, '(a,i0,a,i0,a,i0)') 'app_ring: rank ', rank, ' iteration ', it, ' state ', s
      flush(6)  ! an app-mode rank stopped at its safe point loses what is buffered
    end if
    it = it + 1
  end do
  write(*, '(a,i0,a,i0)') 'app_ring: rank ', rank, ' final ', s
  call MPI_Comm_free(comm, ierr)
  call MPI_Finalize(ierr)
contains
  subroutine sleep_us(us)
    integer, intent(in) :: us
    interface
      integer(c_int) function usleep(n) bind(c, name='usleep')
        import :: c_int
        integer(c_int), value :: n
      end function usleep
    end interface
    integer(c_int) :: r
    r = usleep(int(us, c_int))
  end subroutine sleep_us
end program app_ring
