//! The one framing of every mpicr stream: the control socket between an agent and its keeper,
//! and the coordinator's TCP connections.
//!
//! A frame is a little-endian `u32` length, that many bytes of body (the `postcard` encoding of
//! a message), then a trailer of a length fixed by the protocol (none on the control socket; the
//! 32-byte HMAC tag on a coordinator connection, see [`crate::coord`]).
//!
//! [`write_frame`] and [`read_frame`] are the only functions that put frames on a stream and
//! take them off; descriptors (`SCM_RIGHTS`) travel with a frame through them, and nowhere else.
//!
//! Which frame a descriptor belongs to: the sender attaches descriptors to the first byte of
//! the frame (one `sendmsg`). The reader never asks for more bytes than the frame it reads still
//! lacks, so every `recvmsg` returns bytes of one frame only, and descriptors that come with it
//! belong to that frame (a reader that read ahead got a plain `Failed` and the next
//! `PmiConnect` in one chunk, and had to work out whose descriptor it was).

use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Frames larger than this are refused (a corrupted or hostile peer).
pub const MAX_FRAME: u32 = 256 << 20;
/// The most descriptors one read accepts; more are dropped by the kernel (`MSG_CTRUNC`).
pub const MAX_FDS: usize = 16;

/// Why a frame could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The message does not encode (postcard).
    #[error("{0}")]
    Encode(postcard::Error),
    #[error("frame too large")]
    EncodeTooLarge,
    #[error("frame of {0} bytes exceeds the limit")]
    TooLarge(u32),
    #[error("stream ended inside a frame's length")]
    TruncatedLength,
    #[error("stream ended inside a frame of {0} bytes")]
    Truncated(u32),
    #[error("malformed frame: {0}")]
    Malformed(postcard::Error),
    /// A coordinator frame whose tag does not match (forged, altered, replayed, reordered or
    /// dropped frames).
    #[error("frame {0} failed authentication (forged, altered or replayed)")]
    Auth(u64),
}

impl FrameError {
    /// A read or send timeout of the socket ran out (`SO_RCVTIMEO`/`SO_SNDTIMEO`).
    pub fn is_timeout(&self) -> bool {
        matches!(self, FrameError::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

impl From<FrameError> for io::Error {
    fn from(e: FrameError) -> io::Error {
        match e {
            FrameError::Io(e) => e,
            e @ (FrameError::TruncatedLength | FrameError::Truncated(_)) => io::Error::new(io::ErrorKind::UnexpectedEof, e),
            e => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }
}

/// The `postcard` body of `msg`.
pub fn encode<M: Serialize>(msg: &M) -> Result<Vec<u8>, FrameError> {
    postcard::to_stdvec(msg).map_err(FrameError::Encode)
}

/// Decodes a frame's body.
pub fn decode<M: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<M, FrameError> {
    postcard::from_bytes(body).map_err(FrameError::Malformed)
}

/// `length | body | trailer`: one whole frame, ready for [`write_frame`] or any `Write`.
pub fn frame(body: &[u8], trailer: &[u8]) -> Result<Vec<u8>, FrameError> {
    let len = u32::try_from(body.len()).ok().filter(|&l| l <= MAX_FRAME).ok_or(FrameError::EncodeTooLarge)?;
    let mut out = Vec::with_capacity(4 + body.len() + trailer.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(trailer);
    Ok(out)
}

/// Writes one whole frame (from [`frame`]) on a socket with `MSG_NOSIGNAL` (a peer that went
/// away is an `EPIPE` error, never a SIGPIPE, which would kill a C program that did not ignore
/// it: the agent lives in such programs), with `fds` attached to its first byte as
/// `SCM_RIGHTS`. The caller may close its copies of `fds` afterwards. A socket's send timeout
/// applies (an expired one is an error).
pub fn write_frame(sock: BorrowedFd<'_>, frame: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut sent = 0;
    // The descriptors go with the first bytes sent; the rest is plain data.
    let mut attach: &[RawFd] = &raw;
    while sent < frame.len() {
        let n = sendmsg(sock, &frame[sent..], attach)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the socket accepted no bytes"));
        }
        attach = &[];
        sent += n;
    }
    Ok(())
}

fn cmsg_space(nfds: usize) -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    unsafe { libc::CMSG_SPACE((nfds.max(1) * std::mem::size_of::<RawFd>()) as u32) as usize }
}

/// One `sendmsg(MSG_NOSIGNAL)` of (a prefix of) `data`, with `fds` as `SCM_RIGHTS`; retried on
/// `EINTR`. Returns the bytes sent.
fn sendmsg(sock: BorrowedFd<'_>, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let mut iov = libc::iovec { iov_base: data.as_ptr() as *mut libc::c_void, iov_len: data.len() };
    let space = cmsg_space(fds.len());
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: an all-zero msghdr is a valid value; every pointer stored in it below points to a
    // buffer (iov, data, cbuf) that outlives the sendmsg call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if !fds.is_empty() {
        hdr.msg_control = cbuf.as_mut_ptr().cast();
        hdr.msg_controllen = space as _;
        // SAFETY: the control buffer holds CMSG_SPACE(fds) bytes, so CMSG_FIRSTHDR is non-null
        // and the header with its `fds.len()` ints fits.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast::<RawFd>(), fds.len());
        }
    }
    loop {
        // SAFETY: `hdr` describes live buffers (see above); the socket is borrowed for the call.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r as usize);
    }
}

/// What one read of a [`FrameSource`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Got {
    /// Bytes read; 0 at end of stream.
    pub bytes: usize,
    /// The kernel dropped descriptors that came with them (`MSG_CTRUNC`: no room in the control
    /// buffer, or this process is out of descriptors).
    pub truncated: bool,
}

/// Where [`read_frame`] reads from: any `Read` ([`Plain`]), or a unix socket that may carry
/// descriptors ([`Socket`]).
pub trait FrameSource {
    /// Reads at most `buf.len()` bytes (at least one unless at end of stream), adding any
    /// descriptors that came with them to `fds`.
    fn read_some(&mut self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Got>;
}

/// A byte stream without descriptors.
pub struct Plain<R>(pub R);

impl<R: Read> FrameSource for Plain<R> {
    fn read_some(&mut self, buf: &mut [u8], _fds: &mut Vec<OwnedFd>) -> io::Result<Got> {
        loop {
            match self.0.read(buf) {
                Ok(bytes) => return Ok(Got { bytes, truncated: false }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A unix stream socket, read with `recvmsg`; descriptors arrive close-on-exec.
pub struct Socket<'a>(pub BorrowedFd<'a>);

impl FrameSource for Socket<'_> {
    fn read_some(&mut self, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Got> {
        let space = cmsg_space(MAX_FDS);
        let mut cbuf = vec![0u64; space.div_ceil(8)];
        let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        // SAFETY: an all-zero msghdr is valid; the pointers set below outlive recvmsg.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let n = loop {
            // SAFETY: `msg` describes live, writable buffers; the socket is borrowed.
            let r = unsafe { libc::recvmsg(self.0.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            break r as usize;
        };
        // SAFETY: walking the control messages the kernel wrote into `cbuf`, bounded by
        // msg_controllen; each SCM_RIGHTS payload is an array of ints the kernel installed for
        // this process, which nobody else owns.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let payload = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    let count = payload / std::mem::size_of::<RawFd>();
                    let data = libc::CMSG_DATA(c).cast::<RawFd>();
                    for i in 0..count {
                        fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                    }
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        Ok(Got { bytes: n, truncated: msg.msg_flags & libc::MSG_CTRUNC != 0 })
    }
}

/// One frame as read, not yet decoded.
#[derive(Debug)]
pub struct RawFrame {
    pub body: Vec<u8>,
    /// The protocol's trailer (`trailer_len` bytes).
    pub trailer: Vec<u8>,
    /// Descriptors that came with the frame's bytes.
    pub fds: Vec<OwnedFd>,
    /// The kernel dropped descriptors that came with this frame (`MSG_CTRUNC`).
    pub truncated: bool,
}

/// Reads one frame with a trailer of `trailer_len` bytes; `Ok(None)` on a clean end of stream
/// before the frame started. Never reads past the frame's end. The body grows with what arrives
/// instead of trusting the length, so a hostile length costs nothing.
pub fn read_frame<S: FrameSource + ?Sized>(src: &mut S, trailer_len: usize) -> Result<Option<RawFrame>, FrameError> {
    let mut fds = Vec::new();
    let mut truncated = false;
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let r = src.read_some(&mut len[got..], &mut fds)?;
        truncated |= r.truncated;
        if r.bytes == 0 {
            return if got == 0 && fds.is_empty() { Ok(None) } else { Err(FrameError::TruncatedLength) };
        }
        got += r.bytes;
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    const STEP: usize = 64 << 10;
    let total = len as usize + trailer_len;
    let mut data = Vec::with_capacity(total.min(STEP));
    while data.len() < total {
        let at = data.len();
        data.resize(at + (total - at).min(STEP), 0);
        let r = src.read_some(&mut data[at..], &mut fds)?;
        truncated |= r.truncated;
        data.truncate(at + r.bytes);
        if r.bytes == 0 {
            return Err(FrameError::Truncated(len));
        }
    }
    let trailer = data.split_off(len as usize);
    Ok(Some(RawFrame { body: data, trailer, fds, truncated }))
}

/// One decoded message and the descriptors that came with it.
#[derive(Debug)]
pub struct Received<M> {
    pub msg: M,
    pub fds: Vec<OwnedFd>,
    /// The kernel dropped descriptors that came with this frame (`MSG_CTRUNC`: out of
    /// descriptors?).
    pub truncated: bool,
}

/// Sends one message on a socket, `fds` attached (see [`write_frame`]).
pub fn send_msg<M: Serialize>(sock: BorrowedFd<'_>, msg: &M, fds: &[BorrowedFd<'_>]) -> Result<(), FrameError> {
    write_frame(sock, &frame(&encode(msg)?, &[])?, fds)?;
    Ok(())
}

/// Receives one message from a unix socket with the descriptors sent with it; `Ok(None)` on a
/// clean end of stream.
pub fn recv_msg<M: for<'de> Deserialize<'de>>(sock: BorrowedFd<'_>) -> Result<Option<Received<M>>, FrameError> {
    let Some(f) = read_frame(&mut Socket(sock), 0)? else { return Ok(None) };
    Ok(Some(Received { msg: decode(&f.body)?, fds: f.fds, truncated: f.truncated }))
}

/// Writes one message as a frame on any `Write` (no descriptors).
pub fn write_msg<W: Write, M: Serialize>(w: &mut W, msg: &M) -> Result<(), FrameError> {
    w.write_all(&frame(&encode(msg)?, &[])?)?;
    w.flush()?;
    Ok(())
}

/// Reads one message from any `Read`; `Ok(None)` on a clean end of stream.
pub fn read_msg<R: Read, M: for<'de> Deserialize<'de>>(r: &mut R) -> Result<Option<M>, FrameError> {
    match read_frame(&mut Plain(r), 0)? {
        Some(f) => decode(&f.body).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn inode(fd: BorrowedFd<'_>) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap().ino()
    }

    #[test]
    fn trailer_round_trip_and_exact_reads() {
        let mut buf = frame(b"abc", b"TAG").unwrap();
        buf.extend(frame(b"", b"XYZ").unwrap());
        let mut r = Plain(&buf[..]);
        let f = read_frame(&mut r, 3).unwrap().unwrap();
        assert_eq!((f.body.as_slice(), f.trailer.as_slice()), (&b"abc"[..], &b"TAG"[..]));
        let f = read_frame(&mut r, 3).unwrap().unwrap();
        assert_eq!((f.body.as_slice(), f.trailer.as_slice()), (&b""[..], &b"XYZ"[..]));
        assert!(read_frame(&mut r, 3).unwrap().is_none());
        let e = read_frame(&mut Plain(&buf[..5]), 3).unwrap_err();
        assert!(matches!(e, FrameError::Truncated(3)), "{e}");
        let e = read_frame(&mut Plain(&buf[..2]), 3).unwrap_err();
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn descriptors_travel_with_their_frame() {
        let (a, b) = UnixStream::pair().unwrap();
        let (x, _y) = UnixStream::pair().unwrap();
        let (z, _w) = UnixStream::pair().unwrap();
        send_msg(a.as_fd(), &1u32, &[]).unwrap();
        send_msg(a.as_fd(), &2u32, &[x.as_fd()]).unwrap();
        send_msg(a.as_fd(), &3u32, &[]).unwrap();
        send_msg(a.as_fd(), &4u32, &[z.as_fd(), x.as_fd()]).unwrap();
        drop(a);
        let r: Received<u32> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len(), r.truncated), (1, 0, false));
        let r: Received<u32> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len()), (2, 1));
        assert_eq!(inode(r.fds[0].as_fd()), inode(x.as_fd()));
        assert_ne!(r.fds[0].as_raw_fd(), x.as_raw_fd());
        let r: Received<u32> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len()), (3, 0));
        let r: Received<u32> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len()), (4, 2));
        assert_eq!(inode(r.fds[0].as_fd()), inode(z.as_fd()));
        assert_eq!(inode(r.fds[1].as_fd()), inode(x.as_fd()));
        assert!(recv_msg::<u32>(b.as_fd()).unwrap().is_none());
    }

    /// A frame split over two sends, its descriptor on the first part (three bytes).
    #[test]
    fn descriptor_on_a_split_frame() {
        let (a, b) = UnixStream::pair().unwrap();
        let (x, _y) = UnixStream::pair().unwrap();
        let f = frame(&encode(&7u64).unwrap(), &[]).unwrap();
        send_msg(a.as_fd(), &6u64, &[]).unwrap();
        write_frame(a.as_fd(), &f[..3], &[x.as_fd()]).unwrap();
        let r: Received<u64> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len()), (6, 0));
        write_frame(a.as_fd(), &f[3..], &[]).unwrap();
        let r: Received<u64> = recv_msg(b.as_fd()).unwrap().unwrap();
        assert_eq!((r.msg, r.fds.len()), (7, 1));
    }

    #[test]
    fn a_large_frame_with_a_descriptor_arrives_whole() {
        let (a, b) = UnixStream::pair().unwrap();
        let (x, _y) = UnixStream::pair().unwrap();
        let big = vec![0xA5u8; 1 << 20];
        let t = std::thread::spawn(move || send_msg(a.as_fd(), &big, &[x.as_fd()]).unwrap());
        let r: Received<Vec<u8>> = recv_msg(b.as_fd()).unwrap().unwrap();
        t.join().unwrap();
        assert_eq!(r.msg.len(), 1 << 20);
        assert_eq!(r.fds.len(), 1);
    }

    #[test]
    fn end_inside_a_frame_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        let f = frame(&encode(&"hello").unwrap(), &[]).unwrap();
        write_frame(a.as_fd(), &f[..f.len() - 1], &[]).unwrap();
        drop(a);
        let e = recv_msg::<String>(b.as_fd()).unwrap_err();
        assert!(e.to_string().contains("stream ended inside a frame"), "{e}");
    }
}
