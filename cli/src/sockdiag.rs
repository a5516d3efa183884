//! Which unix socket is connected to which: the kernel's `sock_diag` netlink interface (the one
//! `ss -x` and CRIU use). The keeper asks it, at dump time, which of the program's sockets are
//! the peers of its own ends, so that exactly those are declared `--external unix[INO]`.

use std::collections::HashMap;
use std::io;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const UDIAG_SHOW_PEER: u32 = 0x4;
const UNIX_DIAG_PEER: u16 = 2;

/// Inode of every unix socket on this host mapped to the inode of its peer (connected ones only).
pub fn unix_peers() -> io::Result<HashMap<u64, u64>> {
    // SAFETY: plain socket creation; the descriptor is closed by the guard below.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    struct Guard(i32);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: closes the descriptor this guard owns.
            unsafe { libc::close(self.0) };
        }
    }
    let _guard = Guard(fd);

    let req = request();
    // SAFETY: an all-zero sockaddr_nl addresses the kernel (nl_pid 0).
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: `req` and `addr` are live for the call; lengths match their sizes.
    let r = unsafe {
        libc::sendto(fd, req.as_ptr().cast(), req.len(), 0, (&addr as *const libc::sockaddr_nl).cast(), std::mem::size_of::<libc::sockaddr_nl>() as u32)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut peers = HashMap::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: recv writes at most buf.len() bytes into `buf`.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        if parse(&buf[..n as usize], &mut peers)? {
            return Ok(peers);
        }
    }
}

fn request() -> Vec<u8> {
    let mut m = Vec::with_capacity(40);
    m.extend_from_slice(&40u32.to_ne_bytes()); // nlmsg_len
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes()); // nlmsg_type
    m.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // nlmsg_seq
    m.extend_from_slice(&0u32.to_ne_bytes()); // nlmsg_pid
    m.push(libc::AF_UNIX as u8); // sdiag_family
    m.push(0); // sdiag_protocol
    m.extend_from_slice(&0u16.to_ne_bytes()); // pad
    m.extend_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
    m.extend_from_slice(&0u32.to_ne_bytes()); // udiag_ino
    m.extend_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes()); // udiag_show
    m.extend_from_slice(&[0u8; 8]); // udiag_cookie
    m
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parses one datagram of netlink messages; true once the dump is complete.
fn parse(mut b: &[u8], peers: &mut HashMap<u64, u64>) -> io::Result<bool> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag reply");
    while b.len() >= 16 {
        let len = u32_at(b, 0).ok_or_else(bad)? as usize;
        let ty = u16_at(b, 4).ok_or_else(bad)?;
        if len < 16 || len > b.len() {
            return Err(bad());
        }
        match ty {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => {
                let errno = u32_at(b, 16).map(|e| -(e as i32)).unwrap_or(libc::EIO);
                return Err(io::Error::from_raw_os_error(errno));
            }
            SOCK_DIAG_BY_FAMILY => {
                let body = &b[16..len];
                let ino = u32_at(body, 4).ok_or_else(bad)? as u64;
                let mut attrs = body.get(16..).unwrap_or(&[]);
                while attrs.len() >= 4 {
                    let alen = u16_at(attrs, 0).ok_or_else(bad)? as usize;
                    let aty = u16_at(attrs, 2).ok_or_else(bad)?;
                    if alen < 4 || alen > attrs.len() {
                        break;
                    }
                    if aty == UNIX_DIAG_PEER {
                        if let Some(peer) = u32_at(attrs, 4) {
                            if peer != 0 {
                                peers.insert(ino, peer as u64);
                            }
                        }
                    }
                    attrs = &attrs[align4(alen).min(attrs.len())..];
                }
            }
            _ => {}
        }
        b = &b[align4(len).min(b.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn finds_the_peer_of_a_socketpair() {
        let (a, b) = crate::sys::socketpair().unwrap();
        let ia = crate::sys::inode(a.as_fd()).unwrap();
        let ib = crate::sys::inode(b.as_fd()).unwrap();
        let peers = unix_peers().unwrap();
        assert_eq!(peers.get(&ia), Some(&ib));
        assert_eq!(peers.get(&ib), Some(&ia));
    }
}
