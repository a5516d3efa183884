//! The keeper's end of the control socketpair (protocol: `mpicr_proto`). Frames from the agent
//! may carry descriptors (`SCM_RIGHTS`, e.g. with `PmiConnect`), so reading uses `recvmsg`.
//!
//! Which frame a descriptor belongs to: one `recvmsg` on a unix stream socket may return the
//! bytes of several of the peer's sends (a plain `Failed` followed by a `PmiConnect`, say), but
//! it stops right after the send that carried descriptors, whose bytes (all of them, or as many
//! as fit) end the chunk. Each sender's frame is one send, so the descriptors belong to the
//! frame holding the last byte of the chunk they arrived with, not to the first frame decoded
//! from it (which is what lost `PmiConnect`'s descriptor after an aborted checkpoint).

use mpicr_proto::{FromAgent, ToAgent, MAX_FRAME};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Reads agent frames and the descriptors that arrive with them.
pub struct CtlReader {
    sock: UnixStream,
    buf: Vec<u8>,
    /// Stream offset of `buf[0]`.
    start: u64,
    /// Descriptors received, each batch with the stream offset of the last byte of its chunk.
    fds: VecDeque<(u64, Vec<OwnedFd>)>,
    /// Descriptors the kernel could not deliver (`MSG_CTRUNC`) since the last frame.
    truncated: bool,
}

/// One frame from the agent and what came with it.
pub struct Frame {
    pub msg: FromAgent,
    /// The descriptors sent with this frame.
    pub fds: Vec<OwnedFd>,
    /// The kernel dropped descriptors around this frame (`MSG_CTRUNC`): out of descriptors?
    pub truncated: bool,
}

impl CtlReader {
    pub fn new(sock: UnixStream) -> CtlReader {
        CtlReader { sock, buf: Vec::new(), start: 0, fds: VecDeque::new(), truncated: false }
    }

    /// The next frame; `Ok(None)` at a clean end of stream.
    pub fn next(&mut self) -> io::Result<Option<Frame>> {
        loop {
            if let Some((msg, used)) = decode(&self.buf)? {
                let end = self.start + used as u64;
                self.buf.drain(..used);
                self.start = end;
                let mut fds = Vec::new();
                while self.fds.front().is_some_and(|(at, _)| *at < end) {
                    fds.extend(self.fds.pop_front().map(|(_, f)| f).unwrap_or_default());
                }
                let truncated = std::mem::take(&mut self.truncated);
                return Ok(Some(Frame { msg, fds, truncated }));
            }
            let mut chunk = [0u8; 8192];
            let mut got = Vec::new();
            let r = crate::sys::recv_with_fds(self.sock.as_fd(), &mut chunk, &mut got)?;
            let n = r.bytes;
            self.truncated |= r.truncated;
            if !got.is_empty() {
                // The last byte of this chunk is in the frame the descriptors were sent with.
                let at = self.start + (self.buf.len() + n) as u64;
                self.fds.push_back((at.saturating_sub(1), got));
            }
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the agent closed the control socket mid-frame"));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Decodes one frame from the front of `buf`: `Ok(None)` when incomplete.
pub fn decode(buf: &[u8]) -> io::Result<Option<(FromAgent, usize)>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[..4].try_into().unwrap());
    if len > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("agent frame of {len} bytes exceeds the limit")));
    }
    let end = 4 + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let msg = postcard::from_bytes(&buf[4..end]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("bad agent frame: {e}")))?;
    Ok(Some((msg, end)))
}

/// Sends one message to the agent.
pub fn send(sock: &UnixStream, msg: &ToAgent) -> io::Result<()> {
    mpicr_proto::send_on(sock, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn next(r: &mut CtlReader) -> (FromAgent, Vec<OwnedFd>) {
        let f = r.next().unwrap().unwrap();
        assert!(!f.truncated);
        (f.msg, f.fds)
    }

    #[test]
    fn frames_and_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = CtlReader::new(b);
        let mut w = &a;
        mpicr_proto::send(&mut w, &FromAgent::Request { stop: true }).unwrap();
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::Request { stop: true });
        assert!(fds.is_empty());
        let (x, _y) = crate::sys::socketpair().unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 2 }, x.as_fd()).unwrap();
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 2 });
        assert_eq!(fds.len(), 1);
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(x.as_fd()).unwrap());
        assert!(fds[0].as_raw_fd() != x.as_raw_fd());
        drop(a);
        assert!(r.next().unwrap().is_none());
    }

    /// The agent after an aborted checkpoint: `Failed`, then at once the renewal's `PmiConnect`.
    /// Both arrive in one read; the descriptor is `PmiConnect`'s, not `Failed`'s.
    #[test]
    fn descriptor_stays_with_its_frame_when_reads_coalesce() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = CtlReader::new(b);
        let mut w = &a;
        let (x, _y) = crate::sys::socketpair().unwrap();
        let (z, _v) = crate::sys::socketpair().unwrap();
        mpicr_proto::send(&mut w, &FromAgent::Failed { reason: "aborted by the coordinator: ENOSPC".into() }).unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 2 }, x.as_fd()).unwrap();
        mpicr_proto::send(&mut w, &FromAgent::Drained).unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 3 }, z.as_fd()).unwrap();
        let (m, fds) = next(&mut r);
        assert!(matches!(m, FromAgent::Failed { .. }));
        assert!(fds.is_empty(), "Failed took PmiConnect's descriptor");
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 2 });
        assert_eq!(fds.len(), 1);
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(x.as_fd()).unwrap());
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::Drained);
        assert!(fds.is_empty());
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 3 });
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(z.as_fd()).unwrap());
    }

    /// A frame split over reads, its descriptor on the first part.
    #[test]
    fn descriptor_on_a_split_frame() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = CtlReader::new(b);
        let (x, _y) = crate::sys::socketpair().unwrap();
        let mut frame = Vec::new();
        mpicr_proto::send(&mut frame, &FromAgent::PmiConnect { generation: 7 }).unwrap();
        let mut w = &a;
        mpicr_proto::send(&mut w, &FromAgent::Request { stop: false }).unwrap();
        crate::sys::send_with_fds(a.as_fd(), &frame[..3], &[x.as_raw_fd()]).unwrap();
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::Request { stop: false });
        assert!(fds.is_empty());
        std::io::Write::write_all(&mut w, &frame[3..]).unwrap();
        let (m, fds) = next(&mut r);
        assert_eq!(m, FromAgent::PmiConnect { generation: 7 });
        assert_eq!(fds.len(), 1);
    }
}
