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

use crate::frame::{self, FrameError, Plain};
use crate::CommGid;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 6] = b"MPICR2";
pub const SECRET_LEN: usize = 32;
/// How long a client waits for the handshake to end (at least).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Everything an unauthenticated peer may take of the coordinator: the handshake and its Hello.
/// Shorter than a client's wait, so a client queued behind idle strangers still gets through.
pub const UNAUTHENTICATED_DEADLINE: Duration = Duration::from_secs(4);
/// Length of the HMAC-SHA256 tag that ends every authenticated frame.
pub const TAG_LEN: usize = 32;

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("reading the client's proof")]
    ReadProof(#[source] io::Error),
    #[error("authentication failed (wrong secret)")]
    WrongSecret,
    #[error("reading the coordinator's greeting")]
    ReadGreeting(#[source] io::Error),
    #[error("the peer is not an mpicr coordinator (or one of another mpicr version)")]
    NotCoordinator,
    #[error("the coordinator refused our credentials")]
    CredentialsRefused(#[source] io::Error),
    #[error("the coordinator failed to prove it knows the job secret")]
    ServerProof,
}

/// Per-rank part of a manifest (`MANIFEST.json`), also what a keeper reports after its dump.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankManifest {
    pub rank: i32,
    pub host: String,
    pub pid: i32,
    pub bytes: u64,
    pub files: Vec<FileSum>,
    /// Lower-half renewals still possible in the program (None: unbounded or no agent).
    pub renewals_left: Option<u32>,
    pub drained_msgs: u64,
    pub drained_bytes: u64,
    pub state_bytes: u64,
    pub dump_us: u64,
    /// Agent phases (microseconds), in protocol order.
    pub agent_timings: Vec<(String, u64)>,
}

/// One image file and its checksum: BLAKE3 (hex) since mpicr wrote them with it, SHA-256 (hex)
/// in images of earlier versions, which still verify; the other field is empty. Both are
/// cryptographic, so the signed manifest keeps authenticating the images it lists.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct FileSum {
    pub name: String,
    pub bytes: u64,
    #[serde(default)]
    pub sha256: String,
    #[serde(default)]
    pub blake3: String,
}

/// In JSON (`MANIFEST.json`, which is signed over its re-serialisation) an empty checksum field
/// is left out, so that a manifest of an earlier version serialises to the bytes it was signed
/// as; postcard frames (not self-describing) carry every field.
impl Serialize for FileSum {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let human = s.is_human_readable();
        let keep = |v: &String| !human || !v.is_empty();
        let n = 2 + usize::from(keep(&self.sha256)) + usize::from(keep(&self.blake3));
        let mut st = s.serialize_struct("FileSum", n)?;
        st.serialize_field("name", &self.name)?;
        st.serialize_field("bytes", &self.bytes)?;
        for (key, v) in [("sha256", &self.sha256), ("blake3", &self.blake3)] {
            if keep(v) {
                st.serialize_field(key, v)?;
            } else {
                st.skip_field(key)?;
            }
        }
        st.end()
    }
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
    Request {
        stop: bool,
    },
    /// `groups`: the members of the `MPI_Comm_create_group` keys among `comms`
    /// (`FromAgent::Counters`).
    Counters {
        epoch: u64,
        comms: Vec<(CommGid, u64)>,
        groups: Vec<(CommGid, Vec<i32>)>,
    },
    SendCounts {
        epoch: u64,
        round: u32,
        sent: Vec<(CommGid, i32, u64)>,
        untold: Vec<(CommGid, u64)>,
    },
    /// The agent needs these collective targets raised (`FromAgent::Wants`).
    Wants {
        epoch: u64,
        comms: Vec<(CommGid, u64)>,
        groups: Vec<(CommGid, Vec<i32>)>,
    },
    ReadyToDump {
        epoch: u64,
        drained_msgs: u64,
        drained_bytes: u64,
        state_bytes: u64,
        timings: Vec<(String, u64)>,
    },
    Dumped {
        epoch: u64,
        info: RankManifest,
    },
    Resumed {
        epoch: u64,
        timings: Vec<(String, u64)>,
    },
    /// Checkpoint-and-continue: this rank's dump is complete and its program runs again (its
    /// MPI calls wait at the gate until the renewal, which `Resumed` reports).
    Running {
        epoch: u64,
    },
    Failed {
        epoch: u64,
        reason: String,
    },
    /// Restart: this rank's image is restored and waits for `Go`.
    Restored {
        epoch: u64,
    },
    /// The program ended (the keeper exits next).
    Exiting {
        status: String,
    },
    /// The agent drained and waits for `Release`.
    Drained {
        epoch: u64,
    },
}

/// Coordinator -> keeper.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum FromCoord {
    Welcome {
        job_id: String,
    },
    Refused {
        reason: String,
    },
    Begin {
        epoch: u64,
        stop: bool,
    },
    /// `groups`: targets of the `MPI_Comm_create_group` keys this rank is a member of
    /// (`ToAgent::Targets`).
    Targets {
        epoch: u64,
        round: u32,
        comms: Vec<(CommGid, u64)>,
        groups: Vec<(CommGid, u64)>,
    },
    Expected {
        epoch: u64,
        expect: Vec<(CommGid, i32, u64)>,
    },
    Dump {
        epoch: u64,
    },
    Resume {
        epoch: u64,
    },
    Abort {
        epoch: u64,
        reason: String,
    },
    /// `checkpoint --stop` committed: end the program and exit 0.
    Stop,
    /// Restart: every rank restored the same epoch of the same job; resume.
    Go {
        epoch: u64,
    },
    /// Every rank drained: release the lower half.
    Release {
        epoch: u64,
    },
    /// Checkpoint-and-continue: every rank on this rank's node has dumped `epoch` (reported
    /// `Running`): seal the images now, no longer taking CPU from the node's dumps.
    NodeDumped {
        epoch: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CkptResult {
    pub epoch: u64,
    pub stop_time_us: u64,
    /// Request to the last rank's MPI library renewed (`Manifest::mpi_back_us`).
    #[serde(default)]
    pub mpi_back_us: Option<u64>,
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
    /// The requested checkpoint began, as this epoch (`Done` or `Error` follows).
    Started {
        epoch: u64,
    },
    /// The request waits for what is named (ranks joining, programs initialising MPI) before it
    /// begins, within its timeout.
    Queued(String),
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
fn read_exact_by(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "the handshake took too long"));
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed the connection")),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Server side of the handshake, all of it before `deadline`; errors on a peer without the
/// Server side of the handshake, all of it before `deadline`; errors on a peer without the
/// secret. Returns the authenticated halves of the connection.
pub fn accept_handshake(mut s: TcpStream, secret: &[u8], deadline: Instant) -> Result<(SecureTx, SecureRx), HandshakeError> {
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut ns = [0u8; 32];
    random_bytes(&mut ns)?;
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&ns);
    s.write_all(&hello)?;
    let mut reply = [0u8; 64];
    read_exact_by(&mut s, &mut reply, deadline).map_err(HandshakeError::ReadProof)?;
    let (nc, proof) = reply.split_at(32);
    mac(secret, b"client", &ns, nc).verify_slice(proof).map_err(|_| HandshakeError::WrongSecret)?;
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
pub fn connect_handshake(mut s: TcpStream, secret: &[u8], wait: Duration) -> Result<(SecureTx, SecureRx), HandshakeError> {
    let deadline = Instant::now() + wait;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hello = [0u8; 38];
    read_exact_by(&mut s, &mut hello, deadline).map_err(HandshakeError::ReadGreeting)?;
    if &hello[..6] != MAGIC {
        return Err(HandshakeError::NotCoordinator);
    }
    let ns = &hello[6..];
    let mut nc = [0u8; 32];
    random_bytes(&mut nc)?;
    let proof = mac(secret, b"client", ns, &nc).finalize().into_bytes();
    let mut out = nc.to_vec();
    out.extend_from_slice(&proof);
    s.write_all(&out)?;
    let mut theirs = [0u8; 32];
    read_exact_by(&mut s, &mut theirs, deadline).map_err(HandshakeError::CredentialsRefused)?;
    mac(secret, b"server", &nc, ns).verify_slice(&theirs).map_err(|_| HandshakeError::ServerProof)?;
    s.set_read_timeout(None)?;
    let (c2s, s2c) = session_keys(secret, ns, &nc);
    let r = s.try_clone()?;
    Ok((SecureTx { stream: s, key: c2s, seq: 0 }, SecureRx { stream: r, key: s2c, seq: 0 }))
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

    /// Sends one authenticated frame (and counts it).
    pub fn send<M: Serialize>(&mut self, m: &M) -> Result<(), FrameError> {
        let f = seal_bytes(m, &self.key, self.seq)?;
        self.seq += 1;
        frame::write_frame(self.stream.as_fd(), &f, &[])?;
        Ok(())
    }
}

impl SecureRx {
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Reads and checks one authenticated frame; `Ok(None)` on a clean end of stream before the
    /// frame started.
    pub fn recv<M: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<M>, FrameError> {
        open_frame(&mut Plain(&self.stream), &self.key, &mut self.seq)
    }
}

/// `length | body | tag` of message `m`, the `seq`-th frame of its direction.
pub fn seal_bytes<M: Serialize>(m: &M, key: &[u8; 32], seq: u64) -> Result<Vec<u8>, FrameError> {
    let body = frame::encode(m)?;
    let tag = frame_tag(key, seq, &body).finalize().into_bytes();
    frame::frame(&body, &tag)
}

/// Reads and checks one authenticated frame from `src` (the `*seq`-th of its direction, which it
/// counts); `Ok(None)` on a clean end of stream before the frame started.
pub fn open_frame<S: frame::FrameSource + ?Sized, M: for<'de> Deserialize<'de>>(src: &mut S, key: &[u8; 32], seq: &mut u64) -> Result<Option<M>, FrameError> {
    let Some(f) = frame::read_frame(src, TAG_LEN)? else { return Ok(None) };
    frame_tag(key, *seq, &f.body).verify_slice(&f.trailer).map_err(|_| FrameError::Auth(*seq))?;
    *seq += 1;
    frame::decode(&f.body).map(Some)
}

/// Decodes one authenticated frame from the front of `bytes` (the property tests).
pub fn open_bytes<M: for<'de> Deserialize<'de>>(bytes: &[u8], key: &[u8; 32], seq: &mut u64) -> Result<Option<M>, FrameError> {
    open_frame(&mut Plain(bytes), key, seq)
}

/// Sends `m` on `s` (see [`SecureTx::send`]).
pub fn send<M: Serialize>(s: &mut SecureTx, m: &M) -> Result<(), FrameError> {
    s.send(m)
}

/// Receives from `s` (see [`SecureRx::recv`]).
pub fn recv<M: for<'de> Deserialize<'de>>(s: &mut SecureRx) -> Result<Option<M>, FrameError> {
    s.recv()
}

/// Random bytes from the kernel.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: writes at most `len - filled` bytes into the slice's remaining part.
        let r = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        filled += r as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    type Halves = Result<(SecureTx, SecureRx), HandshakeError>;

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
        assert!(t.elapsed() < Duration::from_secs(5), "{e}");
        drop(c);
    }

    #[test]
    fn altered_replayed_or_dropped_frames_are_refused() {
        let key = [3u8; 32];
        let seal = |m: &FromCoord, k: &[u8; 32], s| seal_bytes(m, k, s).unwrap();
        let f0 = seal(&FromCoord::Resume { epoch: 1 }, &key, 0);
        let f1 = seal(&FromCoord::Stop, &key, 1);
        let mut seq = 0;
        assert_eq!(open_bytes::<FromCoord>(&f0, &key, &mut seq).unwrap(), Some(FromCoord::Resume { epoch: 1 }));
        // Replayed: frame 0 again where frame 1 is due.
        let e = open_bytes::<FromCoord>(&f0, &key, &mut seq).unwrap_err();
        assert!(e.to_string().contains("failed authentication"), "{e}");
        assert_eq!(open_bytes::<FromCoord>(&f1, &key, &mut seq).unwrap(), Some(FromCoord::Stop));
        // Altered: one bit of the body.
        let mut bad = seal(&FromCoord::Resume { epoch: 1 }, &key, 2);
        bad[5] ^= 1;
        assert!(open_bytes::<FromCoord>(&bad, &key, &mut seq).is_err());
        // Dropped: frame 3 arrives where 2 is due. Wrong key: refused.
        assert!(open_bytes::<FromCoord>(&seal(&FromCoord::Stop, &key, 3), &key, &mut seq).is_err());
        assert!(open_bytes::<FromCoord>(&seal(&FromCoord::Stop, &[4; 32], 2), &key, &mut seq).is_err());
        assert_eq!(seq, 2);
    }

    /// The wire format of a sealed frame: length, body, HMAC(key, seq | length | body).
    #[test]
    fn sealed_frame_layout() {
        let key = [9u8; 32];
        let f = seal_bytes(&FromCoord::Stop, &key, 5).unwrap();
        let body = postcard::to_stdvec(&FromCoord::Stop).unwrap();
        assert_eq!(&f[..4], &(body.len() as u32).to_le_bytes());
        assert_eq!(&f[4..4 + body.len()], &body[..]);
        let tag = frame_tag(&key, 5, &body).finalize().into_bytes();
        assert_eq!(&f[4 + body.len()..], &tag[..]);
    }
    #[test]
    fn file_sums_cross_postcard_whole_and_json_without_the_empty_checksum() {
        let new = FileSum { name: "pages-1.img".into(), bytes: 3, sha256: String::new(), blake3: "ab".into() };
        let old = FileSum { name: "pages-1.img".into(), bytes: 3, sha256: "cd".into(), blake3: String::new() };
        for f in [&new, &old] {
            let b = postcard::to_stdvec(f).unwrap();
            assert_eq!(&postcard::from_bytes::<FileSum>(&b).unwrap(), f);
        }
        // A manifest entry of an earlier version re-serialises to the bytes it was signed as.
        let text = r#"{"name":"pages-1.img","bytes":3,"sha256":"cd"}"#;
        let parsed: FileSum = serde_json::from_str(text).unwrap();
        assert_eq!(parsed, old);
        assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
        assert_eq!(serde_json::to_string(&new).unwrap(), r#"{"name":"pages-1.img","bytes":3,"blake3":"ab"}"#);
    }
}
