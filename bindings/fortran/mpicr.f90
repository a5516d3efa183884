! mpicr's C API (include/mpicr.h) for Fortran programs: `use mpicr`.
!
! The functions are looked up at run time (dlsym), so a program built with this module runs
! natively too: without libmpicr.so in the process every call does nothing and
! mpicr_restarted() is 0. Save and restore functions are bind(c) functions of the
! mpicr_dir_fn interface; mpicr_dir(dir) turns their directory into a Fortran string.
! MPI handles (integers with `use mpi`) keep their values across a restart: save them with the
! rest of the program's data.
module mpicr
  use, intrinsic :: iso_c_binding
  implicit none
  private
  public :: mpicr_dir_fn, mpicr_app_register, mpicr_safe_point, mpicr_restarted, mpicr_dir

  abstract interface
    integer(c_int) function mpicr_dir_fn(dir, arg) bind(c)
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: dir
      type(c_ptr), value :: arg
    end function mpicr_dir_fn
  end interface

  abstract interface
    integer(c_int) function register_fn(save, restore, arg) bind(c)
      import :: c_int, c_funptr, c_ptr
      type(c_funptr), value :: save, restore
      type(c_ptr), value :: arg
    end function register_fn
    integer(c_int) function noarg_fn() bind(c)
      import :: c_int
    end function noarg_fn
  end interface

  interface
    type(c_funptr) function c_dlsym(handle, name) bind(c, name='dlsym')
      import :: c_ptr, c_funptr, c_char
      type(c_ptr), value :: handle
      character(kind=c_char), dimension(*), intent(in) :: name
    end function c_dlsym
    integer(c_size_t) function c_strlen(s) bind(c, name='strlen')
      import :: c_size_t, c_char
      character(kind=c_char), dimension(*), intent(in) :: s
    end function c_strlen
  end interface

contains

  ! The C API function `name`, or a null pointer (RTLD_DEFAULT is the null handle in glibc).
  type(c_funptr) function lookup(name)
    character(len=*), intent(in) :: name
    lookup = c_dlsym(c_null_ptr, name // c_null_char)
  end function lookup

  ! Registers save and restore (call it before MPI_Init). Returns 0 (also when not under mpicr).
  integer function mpicr_app_register(save, restore)
    procedure(mpicr_dir_fn) :: save, restore
    procedure(register_fn), pointer :: f
    type(c_funptr) :: p
    mpicr_app_register = 0
    p = lookup('mpicr_app_register')
    if (.not. c_associated(p)) return
    call c_f_procpointer(p, f)
    mpicr_app_register = f(c_funloc(save), c_funloc(restore), c_null_ptr)
  end function mpicr_app_register

  ! A point where an app-mode checkpoint may take this rank.
  integer function mpicr_safe_point()
    mpicr_safe_point = call_noarg('mpicr_safe_point')
  end function mpicr_safe_point

  ! 1 in a process restarted from an epoch (its restore already ran), else 0.
  integer function mpicr_restarted()
    mpicr_restarted = call_noarg('mpicr_restarted')
  end function mpicr_restarted

  integer function call_noarg(name)
    character(len=*), intent(in) :: name
    procedure(noarg_fn), pointer :: f
    type(c_funptr) :: p
    call_noarg = 0
    p = lookup(name)
    if (.not. c_associated(p)) return
    call c_f_procpointer(p, f)
    call_noarg = f()
  end function call_noarg

  ! The directory a save or restore function got, as a Fortran string.
  function mpicr_dir(dir) result(s)
    character(kind=c_char), dimension(*), intent(in) :: dir
    character(len=:), allocatable :: s
    integer :: i, n
    n = int(c_strlen(dir))
    allocate(character(len=n) :: s)
    do i = 1, n
      s(i:i) = dir(i)
    end do
  end function mpicr_dir

end module mpicr
