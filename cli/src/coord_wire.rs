//! The keeper's side of the coordinator's connections: where a coordinator is
//! (`coordinator.json`, the PMI value) and how to reach it. The messages, the handshake and the
//! authenticated frames are `mpicr_proto::coord` (re-exported here).

use crate::images;
use anyhow::{bail, Context, Result};
pub use mpicr_proto::coord::*;
use serde::{Deserialize, Serialize};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

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
/// Connects and authenticates to the coordinator described by `info`.
pub fn connect(info: &CoordInfo, timeout: Duration) -> Result<(SecureTx, SecureRx)> {
    let addr = connect_target(&info.host, info.port, info.bind.as_deref())?;
    let s = TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to the coordinator at {addr}"))?;
    s.set_nodelay(true).ok();
    connect_handshake(s, &info.secret_bytes()?, timeout.max(HANDSHAKE_TIMEOUT)).context("authenticating to the coordinator")
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
