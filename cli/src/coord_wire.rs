//! The coordinator's TCP protocol: mutual HMAC-SHA256 challenge/response over the per-job secret,
//! then authenticated frames carrying the enums below.
//!
//! ```text
//! S->C  "MPICR2" + server nonce (32 bytes)
//! C->S  client nonce (32) + HMAC(secret, "client" | server nonce | client nonce)
//! S->C  HMAC(secret, "server" | client nonce | server nonce)
//! C->S  Hello (a keeper or a client), then messages per role
//! ```
//! Session keys, one per direction: `HMAC(secret, "c2s" | server nonce | client nonce)` and
//! `HMAC(secret, "s2c" | ...)`. Every frame after the handshake is a `u32` length, the postcard
//! body and `HMAC(direction key, sequence number (u64) | length | body)`; the sequence number
//! counts the frames of that direction from 0. A frame that fails authentication (forged,
//! altered, replayed, reordered or dropped) ends the connection.

use crate::images;
use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use mpicr_proto::CommGid;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const MAGIC: &[u8; 6] = b"MPICR2";
pub const SECRET_LEN: usize = 32;
/// How long a client waits for the handshake to end (at least).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Everything an unauthenticated peer may take of the coordinator: the handshake and its Hello.
/// Shorter than a client's wait, so a client queued behind idle strangers still gets through.
pub const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(4);
const TAG_LEN: usize = 32;

/// `DIR/coordinator.json` (mode 0600) and the PMI value handed to the other keepers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordInfo {
    pub job_id: String,
    pub host: String,
    pub port: u16,
    /// Hex of the per-job secret.
    pub secret: String,
    /// Pid of the rank-0 keeper hosting the coordinator.
    pub pid: u32,
    /// The address the coordinator listens on (`127.0.0.1`, an address of `host`, or `0.0.0.0`).
    #[serde(default)]
    pub bind: Option<String>,
}

impl CoordInfo {
    pub fn secret_bytes(&self) -> Result<Vec<u8>> {
        images::unhex(&self.secret).filter(|s| s.len() == SECRET_LEN).context("coordinator secret is malformed")
    }

    /// A compact `job,host,port,secret,pid[,bind]` form that is a plain PMI value.
    pub fn to_pmi_value(&self) -> String {
        let mut v = format!("{},{},{},{},{}", self.job_id, self.host, self.port, self.secret, self.pid);
        if let Some(b) = &self.bind {
            v.push(',');
            v.push_str(b);
        }
        v
    }

    pub fn from_pmi_value(v: &str) -> Result<CoordInfo> {
        let parts: Vec<&str> = v.split(',').collect();
        if parts.len() != 5 && parts.len() != 6 {
            bail!("malformed coordinator address from PMI: {v:?}");
        }
        Ok(CoordInfo {
            job_id: parts[0].into(),
            host: parts[1].into(),
            port: parts[2].parse().context("bad coordinator port from PMI")?,
            secret: parts[3].into(),
            pid: parts[4].parse().context("bad coordinator pid from PMI")?,
            bind: parts.get(5).map(|b| b.to_string()),
        })
    }

    /// Whether this describes a coordinator on this host whose process is gone (a job that was
    /// killed before it could remove its coordinator.json).
    pub fn is_stale(&self) -> bool {
        self.host == crate::sys::hostname() && !crate::sys::pid_exists(self.pid as i32)
    }

    pub fn read(dir: &images::CkptDir) -> Result<CoordInfo> {
        let p = dir.coordinator_path();
        if !p.exists() {
            bail!("no job is running on {} (it has no coordinator.json)", dir.root.display());
        }
        images::read_json(&p)
    }

    pub fn write(&self, dir: &images::CkptDir) -> Result<()> {
        images::write_json_atomic(&dir.coordinator_path(), self)
    }
}

/// The address to reach a coordinator on `host` listening on `bind`: that address when it is a
/// specific one, else loopback when it runs on this host, else `host` resolved.
pub fn connect_target(host: &str, port: u16, bind: Option<&str>) -> Result<std::net::SocketAddr> {
    if let Some(ip) = bind.and_then(|b| b.parse::<std::net::IpAddr>().ok()).filter(|ip| !ip.is_unspecified()) {
        return Ok(std::net::SocketAddr::new(ip, port));
    }
    if host == crate::sys::hostname() {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolving coordinator host {host}"))?
        .next()
        .with_context(|| format!("coordinator host {host} has no address"))
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// The program runs under the shim; its agent speaks the control protocol.
    Agent,
    /// `--no-shim`: an MPI program without agent (no checkpoint possible).
    NoShim,
    /// `--no-mpi`: no agent; checkpoints are plain CRIU dumps.
    NoMpi,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeeperHello {
    pub rank: i32,
    pub size: i32,
    pub job_id: String,
    pub host: String,
    pub keeper_pid: u32,
    pub program_pid: i32,
    pub mode: Mode,
    /// Set by `mpicr restart`: the epoch this keeper restores.
    pub restart_epoch: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Hello {
    Keeper(KeeperHello),
    Client(ClientRequest),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientRequest {
    Checkpoint { stop: bool, timeout_ms: u64 },
    Status,
}

/// What the agent of a rank said about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub library: String,
    pub renew_strategy: String,
    pub renewals_left: Option<u32>,
}

/// Keeper -> coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ToCoord {
    AgentHello(AgentInfo),
    /// The program (C API) or a signal asked for a checkpoint.
    Request { stop: bool },
    Counters { epoch: u64, comms: Vec<(CommGid, u64)> },
    SendCounts { epoch: u64, sent: Vec<(CommGid, i32, u64)> },
    ReadyToDump { epoch: u64, drained_msgs: u64, drained_bytes: u64, state_bytes: u64, timings: Vec<(String, u64)> },
    Dumped { epoch: u64, info: images::RankManifest },
    Resumed { epoch: u64, timings: Vec<(String, u64)> },
    Failed { epoch: u64, reason: String },
    /// Restart: this rank's image is restored and waits for `Go`.
    Restored { epoch: u64 },
    /// The program ended (the keeper exits next).
    Exiting { status: String },
    /// The agent drained and waits for `Release`.
    Drained { epoch: u64 },
}

/// Coordinator -> keeper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromCoord {
    Welcome { job_id: String },
    Refused { reason: String },
    Begin { epoch: u64, stop: bool },
    Targets { epoch: u64, comms: Vec<(CommGid, u64)> },
    Expected { epoch: u64, expect: Vec<(CommGid, i32, u64)> },
    Dump { epoch: u64 },
    Resume { epoch: u64 },
    Abort { epoch: u64, reason: String },
    /// `checkpoint --stop` committed: end the program and exit 0.
    Stop,
    /// Restart: every rank restored the same epoch of the same job; resume.
    Go { epoch: u64 },
    /// Every rank drained: release the lower half.
    Release { epoch: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CkptResult {
    pub epoch: u64,
    pub stop_time_us: u64,
    pub bytes: u64,
    pub ranks: i32,
    pub stopped: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveStatus {
    pub job_id: String,
    pub size: i32,
    pub registered: Vec<i32>,
    pub agents: Vec<(i32, AgentInfo)>,
    pub in_progress: Option<u64>,
    pub restart_pending: Option<u64>,
}

/// Coordinator -> client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToClient {
    Done(CkptResult),
    Error(String),
    Status(LiveStatus),
}

fn mac(secret: &[u8], role: &[u8], a: &[u8], b: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(secret).expect("HMAC takes any key length");
    m.update(role);
    m.update(a);
    m.update(b);
    m
}

/// The two session keys of a connection: `(client to server, server to client)`.
fn session_keys(secret: &[u8], ns: &[u8], nc: &[u8]) -> ([u8; 32], [u8; 32]) {
    let c2s = mac(secret, b"c2s", ns, nc).finalize().into_bytes().into();
    let s2c = mac(secret, b"s2c", ns, nc).finalize().into_bytes().into();
    (c2s, s2c)
}

/// `read_exact` that gives up at `deadline` (a peer trickling bytes cannot stretch it).
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the handshake took too long"));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the peer closed the connection")),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Server side of the handshake, all of it before `deadline`; errors on a peer without the
/// secret. Returns the authenticated halves of the connection.
pub fn accept_handshake(mut s: TcpStream, secret: &[u8], deadline: Instant) -> Result<(SecureTx, SecureRx)> {
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut ns = [0u8; 32];
    crate::sys::random_bytes(&mut ns)?;
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&ns);
    s.write_all(&hello)?;
    let mut reply = [0u8; 64];
    read_exact_by(&mut s, &mut reply, deadline).context("reading the client's proof")?;
    let (nc, proof) = reply.split_at(32);
    mac(secret, b"client", &ns, nc).verify_slice(proof).map_err(|_| anyhow::anyhow!("authentication failed (wrong secret)"))?;
    let ours = mac(secret, b"server", nc, &ns).finalize().into_bytes();
    s.write_all(&ours)?;
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    s.set_read_timeout(Some(left))?;
    let (c2s, s2c) = session_keys(secret, &ns, nc);
    let r = s.try_clone()?;
    Ok((SecureTx { stream: s, key: s2c, seq: 0 }, SecureRx { stream: r, key: c2s, seq: 0 }))
}

/// Client side of the handshake, all of it within `wait`; errors unless the server knows the
/// secret too.
pub fn connect_handshake(mut s: TcpStream, secret: &[u8], wait: Duration) -> Result<(SecureTx, SecureRx)> {
    let deadline = Instant::now() + wait;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hello = [0u8; 38];
    read_exact_by(&mut s, &mut hello, deadline).context("reading the coordinator's greeting")?;
    if &hello[..6] != MAGIC {
        bail!("the peer is not an mpicr coordinator (or one of another mpicr version)");
    }
    let ns = &hello[6..];
    let mut nc = [0u8; 32];
    crate::sys::random_bytes(&mut nc)?;
    let proof = mac(secret, b"client", ns, &nc).finalize().into_bytes();
    let mut out = nc.to_vec();
    out.extend_from_slice(&proof);
    s.write_all(&out)?;
    let mut theirs = [0u8; 32];
    read_exact_by(&mut s, &mut theirs, deadline).context("the coordinator refused our credentials")?;
    mac(secret, b"server", &nc, ns)
        .verify_slice(&theirs)
        .map_err(|_| anyhow::anyhow!("the coordinator failed to prove it knows the job secret"))?;
    s.set_read_timeout(None)?;
    let (c2s, s2c) = session_keys(secret, ns, &nc);
    let r = s.try_clone()?;
    Ok((SecureTx { stream: s, key: c2s, seq: 0 }, SecureRx { stream: r, key: s2c, seq: 0 }))
}

/// Connects and authenticates to the coordinator described by `info`.
pub fn connect(info: &CoordInfo, timeout: Duration) -> Result<(SecureTx, SecureRx)> {
    let addr = connect_target(&info.host, info.port, info.bind.as_deref())?;
    let s = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to the coordinator at {addr}"))?;
    s.set_nodelay(true).ok();
    connect_handshake(s, &info.secret_bytes()?, timeout.max(HANDSHAKE_TIMEOUT)).context("authenticating to the coordinator")
}

/// The sending half of an authenticated connection.
pub struct SecureTx {
    stream: TcpStream,
    key: [u8; 32],
    seq: u64,
}

/// The receiving half of an authenticated connection.
pub struct SecureRx {
    stream: TcpStream,
    key: [u8; 32],
    seq: u64,
}

fn frame_tag(key: &[u8; 32], seq: u64, body: &[u8]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(&seq.to_le_bytes());
    m.update(&(body.len() as u32).to_le_bytes());
    m.update(body);
    m
}

impl SecureTx {
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Encodes one authenticated frame (and counts it).
    fn seal<M: Serialize>(&mut self, m: &M) -> std::io::Result<Vec<u8>> {
        let frame = seal_frame(m, &self.key, self.seq)?;
        self.seq += 1;
        Ok(frame)
    }
}

/// `length | body | tag` of message `m`, the `seq`-th frame of its direction.
fn seal_frame<M: Serialize>(m: &M, key: &[u8; 32], seq: u64) -> std::io::Result<Vec<u8>> {
    let body = postcard::to_stdvec(m).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let len = u32::try_from(body.len()).ok().filter(|&l| l <= mpicr_proto::MAX_FRAME);
    let len = len.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "frame too large"))?;
    let tag = frame_tag(key, seq, &body).finalize().into_bytes();
    let mut frame = Vec::with_capacity(4 + body.len() + TAG_LEN);
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&tag);
    Ok(frame)
}

impl SecureRx {
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// Reads and checks one authenticated frame from `r`; `Ok(None)` on a clean end of stream
/// before the frame started.
fn open_frame<R: Read, M: for<'de> Deserialize<'de>>(r: &mut R, key: &[u8; 32], seq: &mut u64) -> std::io::Result<Option<M>> {
    use std::io::{Error, ErrorKind};
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len);
    if len > mpicr_proto::MAX_FRAME {
        return Err(Error::new(ErrorKind::InvalidData, format!("frame of {len} bytes exceeds the limit")));
    }
    let mut body = Vec::with_capacity((len as usize).min(64 << 10));
    r.take(len as u64 + TAG_LEN as u64).read_to_end(&mut body)?;
    if body.len() != len as usize + TAG_LEN {
        return Err(Error::new(ErrorKind::UnexpectedEof, format!("stream ended inside a frame of {len} bytes")));
    }
    let tag = body.split_off(len as usize);
    frame_tag(key, *seq, &body)
        .verify_slice(&tag)
        .map_err(|_| Error::new(ErrorKind::InvalidData, format!("frame {} failed authentication (forged, altered or replayed)", *seq)))?;
    *seq += 1;
    mpicr_proto::decode_body(&body).map(Some)
}

pub fn send<M: Serialize>(s: &mut SecureTx, m: &M) -> std::io::Result<()> {
    let frame = s.seal(m)?;
    let mut w = &s.stream;
    w.write_all(&frame)?;
    w.flush()
}

pub fn recv<M: for<'de> Deserialize<'de>>(s: &mut SecureRx) -> std::io::Result<Option<M>> {
    let mut r = &s.stream;
    open_frame(&mut r, &s.key, &mut s.seq)
}

/// Decodes one authenticated frame from bytes (the property tests).
#[cfg(test)]
pub fn open_bytes<M: for<'de> Deserialize<'de>>(mut bytes: &[u8], key: &[u8; 32], seq: &mut u64) -> std::io::Result<Option<M>> {
    open_frame(&mut bytes, key, seq)
}

/// Encodes one authenticated frame to bytes (the property tests).
#[cfg(test)]
pub fn seal_bytes<M: Serialize>(m: &M, key: &[u8; 32], seq: u64) -> Vec<u8> {
    seal_frame(m, key, seq).unwrap()
}

/// Removes `coordinator.json` if it still describes this coordinator.
pub fn remove_if_ours(dir: &images::CkptDir, job_id: &str, pid: u32) {
    let p = dir.coordinator_path();
    if let Ok(info) = images::read_json::<CoordInfo>(&p) {
        if info.job_id == job_id && info.pid == pid {
            let _ = std::fs::remove_file(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    type Halves = Result<(SecureTx, SecureRx)>;

    fn pair(server_secret: Vec<u8>, client_secret: Vec<u8>) -> (Halves, Halves) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            accept_handshake(s, &server_secret, Instant::now() + HANDSHAKE_TIMEOUT)
        });
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let rc = connect_handshake(c, &client_secret, HANDSHAKE_TIMEOUT);
        (t.join().unwrap(), rc)
    }

    #[test]
    fn same_secret_authenticates_both_ways_and_frames_flow() {
        let (s, c) = pair(vec![7; 32], vec![7; 32]);
        let ((mut stx, mut srx), (mut ctx, mut crx)) = (s.unwrap(), c.unwrap());
        for i in 0..3 {
            send(&mut ctx, &ToCoord::Request { stop: i == 2 }).unwrap();
            assert_eq!(recv::<ToCoord>(&mut srx).unwrap(), Some(ToCoord::Request { stop: i == 2 }));
            send(&mut stx, &FromCoord::Dump { epoch: i }).unwrap();
            assert_eq!(recv::<FromCoord>(&mut crx).unwrap(), Some(FromCoord::Dump { epoch: i }));
        }
        drop(ctx);
        drop(crx);
        assert_eq!(recv::<ToCoord>(&mut srx).unwrap(), None);
    }

    #[test]
    fn wrong_secret_is_refused() {
        let (s, c) = pair(vec![7; 32], vec![8; 32]);
        assert!(s.err().unwrap().to_string().contains("authentication failed"));
        assert!(c.is_err());
    }

    #[test]
    fn a_silent_peer_is_dropped_at_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        let t = Instant::now();
        let e = accept_handshake(s, &[1; 32], Instant::now() + Duration::from_millis(300)).err().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{e:#}");
        drop(c);
    }

    #[test]
    fn altered_replayed_or_dropped_frames_are_refused() {
        let key = [3u8; 32];
        let f0 = seal_bytes(&FromCoord::Resume { epoch: 1 }, &key, 0);
        let f1 = seal_bytes(&FromCoord::Stop, &key, 1);
        let mut seq = 0;
        assert_eq!(open_bytes::<FromCoord>(&f0, &key, &mut seq).unwrap(), Some(FromCoord::Resume { epoch: 1 }));
        // Replayed: frame 0 again where frame 1 is due.
        let e = open_bytes::<FromCoord>(&f0, &key, &mut seq).unwrap_err();
        assert!(e.to_string().contains("failed authentication"), "{e}");
        assert_eq!(open_bytes::<FromCoord>(&f1, &key, &mut seq).unwrap(), Some(FromCoord::Stop));
        // Altered: one bit of the body.
        let mut bad = seal_bytes(&FromCoord::Resume { epoch: 1 }, &key, 2);
        bad[5] ^= 1;
        assert!(open_bytes::<FromCoord>(&bad, &key, &mut seq).is_err());
        // Dropped: frame 3 arrives where 2 is due. Wrong key: refused.
        assert!(open_bytes::<FromCoord>(&seal_bytes(&FromCoord::Stop, &key, 3), &key, &mut seq).is_err());
        assert!(open_bytes::<FromCoord>(&seal_bytes(&FromCoord::Stop, &[4; 32], 2), &key, &mut seq).is_err());
        assert_eq!(seq, 2);
    }

    #[test]
    fn pmi_value_round_trip() {
        let mut i = CoordInfo { job_id: "ab12".into(), host: "node-1".into(), port: 4242, secret: "00ff".into(), pid: 9, bind: None };
        let v = i.to_pmi_value();
        assert!(crate::pmi::is_plain_value(&v));
        assert_eq!(CoordInfo::from_pmi_value(&v).unwrap(), i);
        i.bind = Some("10.1.2.3".into());
        assert_eq!(CoordInfo::from_pmi_value(&i.to_pmi_value()).unwrap(), i);
        assert!(CoordInfo::from_pmi_value("a,b").is_err());
    }

    #[test]
    fn connect_targets() {
        let me = crate::sys::hostname();
        assert_eq!(connect_target(&me, 5, None).unwrap().to_string(), "127.0.0.1:5");
        assert_eq!(connect_target(&me, 5, Some("0.0.0.0")).unwrap().to_string(), "127.0.0.1:5");
        assert_eq!(connect_target(&me, 5, Some("10.1.2.3")).unwrap().to_string(), "10.1.2.3:5");
        assert_eq!(connect_target("elsewhere", 5, Some("10.1.2.3")).unwrap().to_string(), "10.1.2.3:5");
    }
}
