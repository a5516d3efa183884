//! The keeper's end of the control socketpair (protocol: `mpicr_proto`). Frames from the agent
//! may carry descriptors (`SCM_RIGHTS`, e.g. with `PmiConnect`), so reading uses `recvmsg`.

use mpicr_proto::{FromAgent, ToAgent, MAX_FRAME};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Reads agent frames and the descriptors that arrive with them.
pub struct CtlReader {
    sock: UnixStream,
    buf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
}

impl CtlReader {
    pub fn new(sock: UnixStream) -> CtlReader {
        CtlReader { sock, buf: Vec::new(), fds: VecDeque::new() }
    }

    /// The next frame; `Ok(None)` at a clean end of stream. Every descriptor received since the
    /// previous frame is returned with it (a `PmiConnect` frame carries exactly one).
    pub fn next(&mut self) -> io::Result<Option<(FromAgent, Vec<OwnedFd>)>> {
        loop {
            if let Some((msg, used)) = decode(&self.buf)? {
                self.buf.drain(..used);
                let fds = self.fds.drain(..).collect();
                return Ok(Some((msg, fds)));
            }
            let mut chunk = [0u8; 8192];
            let mut got = Vec::new();
            let n = crate::sys::recv_with_fds(self.sock.as_fd(), &mut chunk, &mut got)?;
            self.fds.extend(got);
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
    let mut w = sock;
    mpicr_proto::send(&mut w, msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn frames_and_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut r = CtlReader::new(b);
        let mut w = &a;
        mpicr_proto::send(&mut w, &FromAgent::Request { stop: true }).unwrap();
        let (m, fds) = r.next().unwrap().unwrap();
        assert_eq!(m, FromAgent::Request { stop: true });
        assert!(fds.is_empty());
        let (x, _y) = crate::sys::socketpair().unwrap();
        mpicr_proto::send_with_fd(&a, &FromAgent::PmiConnect { generation: 2 }, x.as_fd()).unwrap();
        let (m, fds) = r.next().unwrap().unwrap();
        assert_eq!(m, FromAgent::PmiConnect { generation: 2 });
        assert_eq!(fds.len(), 1);
        assert_eq!(crate::sys::inode(fds[0].as_fd()).unwrap(), crate::sys::inode(x.as_fd()).unwrap());
        assert!(fds[0].as_raw_fd() != x.as_raw_fd());
        drop(a);
        assert!(r.next().unwrap().is_none());
    }
}
