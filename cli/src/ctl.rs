//! The keeper's end of the control socketpair (protocol: `mpicr_proto`). Frames from the agent
//! may carry descriptors (`SCM_RIGHTS`, e.g. with `PmiConnect`); `mpicr_proto::frame` reads them
//! with the frame they were sent with.

use mpicr_proto::{FrameError, FromAgent, Received, ToAgent};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

/// One frame from the agent and the descriptors sent with it.
pub type Frame = Received<FromAgent>;

/// The next frame from the agent; `Ok(None)` at a clean end of stream.
pub fn next(sock: &UnixStream) -> Result<Option<Frame>, FrameError> {
    mpicr_proto::frame::recv_msg(sock.as_fd())
}

/// Sends one message to the agent.
pub fn send(sock: &UnixStream, msg: &ToAgent) -> Result<(), FrameError> {
    mpicr_proto::frame::send_msg(sock.as_fd(), msg, &[])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, OwnedFd};

    fn next_ok(r: &UnixStream) -> (FromAgent, Vec<OwnedFd>) {
        let f = next(r).unwrap().unwrap();
        assert!(!f.truncated);
        (f.msg, f.fds)
    }

    #[test]
    fn frames_and_descriptors() {
        let (a, r) = UnixStream::pair().unwrap();
        let mut w = &a;
        mpicr_proto::send(&mut w, &FromAgent::Request { stop: true }).unwrap();
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::Request { stop: true });
        assert!(fds.is_empty());
        let (x, _y) = crate::sys::socketpair().unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 2 }, x.as_fd()).unwrap();
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 2 });
        assert_eq!(fds.len(), 1);
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(x.as_fd()).unwrap());
        assert!(fds[0].as_raw_fd() != x.as_raw_fd());
        drop(a);
        assert!(next(&r).unwrap().is_none());
    }

    /// The agent after an aborted checkpoint: `Failed`, then at once the renewal's `PmiConnect`.
    /// Both are queued before the keeper reads; the descriptor is `PmiConnect`'s, not `Failed`'s.
    #[test]
    fn descriptor_stays_with_its_frame_when_frames_queue_up() {
        let (a, r) = UnixStream::pair().unwrap();
        let mut w = &a;
        let (x, _y) = crate::sys::socketpair().unwrap();
        let (z, _v) = crate::sys::socketpair().unwrap();
        mpicr_proto::send(&mut w, &FromAgent::Failed { reason: "aborted by the coordinator: ENOSPC".into() }).unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 2 }, x.as_fd()).unwrap();
        mpicr_proto::send(&mut w, &FromAgent::Drained).unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 3 }, z.as_fd()).unwrap();
        let (m, fds) = next_ok(&r);
        assert!(matches!(m, FromAgent::Failed { .. }));
        assert!(fds.is_empty(), "Failed took PmiConnect's descriptor");
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 2 });
        assert_eq!(fds.len(), 1);
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(x.as_fd()).unwrap());
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::Drained);
        assert!(fds.is_empty());
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 3 });
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(z.as_fd()).unwrap());
    }

    /// A frame split over sends, its descriptor on the first part.
    #[test]
    fn descriptor_on_a_split_frame() {
        let (a, r) = UnixStream::pair().unwrap();
        let (x, _y) = crate::sys::socketpair().unwrap();
        let mut frame = Vec::new();
        mpicr_proto::send(&mut frame, &FromAgent::PmiConnect { generation: 7 }).unwrap();
        let mut w = &a;
        mpicr_proto::send(&mut w, &FromAgent::Request { stop: false }).unwrap();
        mpicr_proto::frame::write_frame(a.as_fd(), &frame[..3], &[x.as_fd()]).unwrap();
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::Request { stop: false });
        assert!(fds.is_empty());
        std::io::Write::write_all(&mut w, &frame[3..]).unwrap();
        let (m, fds) = next_ok(&r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 7 });
        assert_eq!(fds.len(), 1);
    }
}
