//! The coordinator's TCP protocol: mutual HMAC-SHA256 challenge/response over the per-job secret,
//! then frames in the format of `mpicr_proto` (u32 length + postcard) carrying the enums below.
//!
//! ```text
//! S->C  "MPICR1" + server nonce (32 bytes)
//! C->S  client nonce (32) + HMAC(secret, "client" | server nonce | client nonce)
//! S->C  HMAC(secret, "server" | client nonce | server nonce)
//! C->S  Hello (a keeper or a client), then messages per role
//! ```

use crate::images;
use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use mpicr_proto::CommGid;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

const MAGIC: &[u8; 6] = b"MPICR1";
pub const SECRET_LEN: usize = 32;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
}

impl CoordInfo {
    pub fn secret_bytes(&self) -> Result<Vec<u8>> {
        images::unhex(&self.secret).filter(|s| s.len() == SECRET_LEN).context("coordinator secret is malformed")
    }

    /// A compact `job,host,port,secret,pid` form that is a plain PMI value.
    pub fn to_pmi_value(&self) -> String {
        format!("{},{},{},{},{}", self.job_id, self.host, self.port, self.secret, self.pid)
    }

    pub fn from_pmi_value(v: &str) -> Result<CoordInfo> {
        let parts: Vec<&str> = v.split(',').collect();
        if parts.len() != 5 {
            bail!("malformed coordinator address from PMI: {v:?}");
        }
        Ok(CoordInfo {
            job_id: parts[0].into(),
            host: parts[1].into(),
            port: parts[2].parse().context("bad coordinator port from PMI")?,
            secret: parts[3].into(),
            pid: parts[4].parse().context("bad coordinator pid from PMI")?,
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

/// The address to reach a coordinator on `host`: loopback when it runs on this host.
pub fn connect_target(host: &str, port: u16) -> Result<std::net::SocketAddr> {
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

/// Server side of the handshake; errors on a peer without the secret.
pub fn accept_handshake(s: &mut TcpStream, secret: &[u8]) -> Result<()> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut ns = [0u8; 32];
    crate::sys::random_bytes(&mut ns)?;
    let mut hello = MAGIC.to_vec();
    hello.extend_from_slice(&ns);
    s.write_all(&hello)?;
    let mut reply = [0u8; 64];
    s.read_exact(&mut reply).context("reading the client's proof")?;
    let (nc, proof) = reply.split_at(32);
    mac(secret, b"client", &ns, nc).verify_slice(proof).map_err(|_| anyhow::anyhow!("authentication failed (wrong secret)"))?;
    let ours = mac(secret, b"server", nc, &ns).finalize().into_bytes();
    s.write_all(&ours)?;
    s.set_read_timeout(None)?;
    Ok(())
}

/// Client side of the handshake; errors unless the server knows the secret too.
pub fn connect_handshake(s: &mut TcpStream, secret: &[u8]) -> Result<()> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hello = [0u8; 38];
    s.read_exact(&mut hello).context("reading the coordinator's greeting")?;
    if &hello[..6] != MAGIC {
        bail!("the peer is not an mpicr coordinator");
    }
    let ns = &hello[6..];
    let mut nc = [0u8; 32];
    crate::sys::random_bytes(&mut nc)?;
    let proof = mac(secret, b"client", ns, &nc).finalize().into_bytes();
    let mut out = nc.to_vec();
    out.extend_from_slice(&proof);
    s.write_all(&out)?;
    let mut theirs = [0u8; 32];
    s.read_exact(&mut theirs).context("the coordinator refused our credentials")?;
    mac(secret, b"server", &nc, ns)
        .verify_slice(&theirs)
        .map_err(|_| anyhow::anyhow!("the coordinator failed to prove it knows the job secret"))?;
    s.set_read_timeout(None)?;
    Ok(())
}

/// Connects and authenticates to the coordinator described by `info`.
pub fn connect(info: &CoordInfo, timeout: Duration) -> Result<TcpStream> {
    let addr = connect_target(&info.host, info.port)?;
    let mut s = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to the coordinator at {addr}"))?;
    s.set_nodelay(true).ok();
    connect_handshake(&mut s, &info.secret_bytes()?).context("authenticating to the coordinator")?;
    Ok(s)
}

pub fn send<M: Serialize>(s: &mut TcpStream, m: &M) -> std::io::Result<()> {
    mpicr_proto::send(s, m)
}

pub fn recv<M: for<'de> Deserialize<'de>>(s: &mut TcpStream) -> std::io::Result<Option<M>> {
    mpicr_proto::recv(s)
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

    fn pair(server_secret: Vec<u8>, client_secret: Vec<u8>) -> (Result<()>, Result<()>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            accept_handshake(&mut s, &server_secret)
        });
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let rc = connect_handshake(&mut c, &client_secret);
        drop(c);
        (t.join().unwrap(), rc)
    }

    #[test]
    fn same_secret_authenticates_both_ways() {
        let (s, c) = pair(vec![7; 32], vec![7; 32]);
        s.unwrap();
        c.unwrap();
    }

    #[test]
    fn wrong_secret_is_refused() {
        let (s, c) = pair(vec![7; 32], vec![8; 32]);
        assert!(s.unwrap_err().to_string().contains("authentication failed"));
        assert!(c.is_err());
    }

    #[test]
    fn pmi_value_round_trip() {
        let i = CoordInfo { job_id: "ab12".into(), host: "node-1".into(), port: 4242, secret: "00ff".into(), pid: 9 };
        let v = i.to_pmi_value();
        assert!(crate::pmi::is_plain_value(&v));
        assert_eq!(CoordInfo::from_pmi_value(&v).unwrap(), i);
        assert!(CoordInfo::from_pmi_value("a,b").is_err());
    }
}
