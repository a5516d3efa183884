//! The PMI wire protocols spoken by MPICH's PMI client (in libmpich) and Hydra, and the pure
//! rewriting rules of the keeper's relay (see `pmi_relay` for the I/O).
//!
//! Wire formats (MPICH `src/pmi/src/pmi_wire.c`, `src/pmi/maint/pmi-*.txt`):
//! - PMI-1 (`v1`): one command per line, `cmd=NAME key=value key=value\n`; values may carry
//!   backslash escapes (we never touch values, so escapes pass through). Spawn uses a multi-line
//!   form `mcmd=spawn\n...endcmd\n`, relayed opaquely.
//! - PMI-2 (`v2`): a 6-character decimal length, then `cmd=NAME;key=value;...;`.
//!
//! Observed (strace of `hello` under Hydra): MPICH 4.0.2 sends `init pmi_version=1
//! pmi_subversion=1` and Hydra 4.0.2 answers 1.1; MPICH 5.0.2 sends the same and its Hydra
//! answers 1.2 (`rc=0` first, `barrier_out tag=0`). Both use PMI-1 over `PMI_FD` unless the
//! program selects PMI-2 (`MPIR_CVAR_PMI_VERSION=2` in MPICH >= 4.1). MPICH 4.0.2 shuts down
//! and closes the PMI socket at `PMI_Finalize`; 5.0.2 keeps it open.
//! Intel MPI over Slurm's `libpmi2.so` under `srun --mpi=pmi2` sends `cmd=init pmi_version=2
//! pmi_subversion=0` (a PMI-1 line), then PMI-2 only: `fullinit;pmijobid=..;pmirank=..`,
//! `job-getid`, `info-getjobattr` (`PMI_process_mapping`), `kvs-put`, `kvs-fence`, `kvs-get`,
//! `info-putnodeattr`/`info-getnodeattr;wait=TRUE` (node-local broadcasts), `finalize`.
//!
//! Relay rules (per request, see [`Rules::request`]):
//! - `finalize` is answered by the keeper itself (the launcher sees one finalize, from the keeper,
//!   when the job really ends); every other command goes to the launcher.
//! - The kvsname presented to the program is the job's first one, across lower-half renewals and
//!   restarts under a new launcher; requests naming it are rewritten to the launcher's current one.
//! - Keys of generation `G >= 1` get the prefix `g<G>-`, so a second business-card exchange does
//!   not collide with the first in the launcher's store. Launcher-provided attributes (`PMI_*`)
//!   are never prefixed. `get_maxes` reports a key length reduced by [`KEY_PREFIX_RESERVE`].

use std::fmt;

/// Characters reserved in every key for the generation prefix.
pub const KEY_PREFIX_RESERVE: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    V1,
    V2,
}

/// One command or response, with its tokens in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A parsed `cmd=...` message.
    Cmd { wire: Wire, tokens: Vec<(String, Option<String>)> },
    /// A PMI-1 `mcmd=spawn` block, passed through untouched.
    Opaque(Vec<u8>),
}

impl Msg {
    pub fn new(wire: Wire, cmd: &str) -> Msg {
        Msg::Cmd { wire, tokens: vec![("cmd".into(), Some(cmd.into()))] }
    }

    pub fn with(mut self, key: &str, val: impl fmt::Display) -> Msg {
        self.set(key, &val.to_string());
        self
    }

    #[cfg(test)]
    pub fn wire(&self) -> Wire {
        match self {
            Msg::Cmd { wire, .. } => *wire,
            Msg::Opaque(_) => Wire::V1,
        }
    }

    pub fn cmd(&self) -> &str {
        self.get("cmd").unwrap_or(match self {
            Msg::Opaque(_) => "spawn",
            _ => "",
        })
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        match self {
            Msg::Cmd { tokens, .. } => tokens.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_deref()),
            Msg::Opaque(_) => None,
        }
    }

    pub fn set(&mut self, key: &str, val: &str) {
        if let Msg::Cmd { tokens, .. } = self {
            match tokens.iter_mut().find(|(k, _)| k == key) {
                Some(t) => t.1 = Some(val.to_string()),
                None => tokens.push((key.to_string(), Some(val.to_string()))),
            }
        }
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Opaque(b) => b.clone(),
            Msg::Cmd { wire: Wire::V1, tokens } => {
                let mut s = String::new();
                for (i, (k, v)) in tokens.iter().enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    s.push_str(k);
                    if let Some(v) = v {
                        s.push('=');
                        s.push_str(v);
                    }
                }
                s.push('\n');
                s.into_bytes()
            }
            Msg::Cmd { wire: Wire::V2, tokens } => {
                let mut s = String::new();
                for (k, v) in tokens {
                    s.push_str(k);
                    if let Some(v) = v {
                        s.push('=');
                        s.push_str(v);
                    }
                    s.push(';');
                }
                let mut out = format!("{:>6}", s.len()).into_bytes();
                out.extend_from_slice(s.as_bytes());
                out
            }
        }
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.encode();
        write!(f, "{}", String::from_utf8_lossy(&b).trim_end())
    }
}

/// Bytes that are no PMI message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PmiError {
    #[error("a PMI message longer than {MAX_MESSAGE} bytes")]
    TooLong,
    #[error("PMI-1 line is not UTF-8")]
    V1NotUtf8,
    #[error("not a PMI message: {0:?}")]
    NotPmi(String),
    #[error("PMI-2 message is not UTF-8")]
    V2NotUtf8,
    #[error("PMI-2 message without cmd=: {0:?}")]
    NoCmd(String),
}

/// Splits one complete message off the front of `buf`: `Ok(Some((msg, consumed)))`, `Ok(None)`
/// when more bytes are needed, `Err` for bytes that are no PMI at all.
pub fn split(buf: &[u8]) -> Result<Option<(Msg, usize)>, PmiError> {
    match split_inner(buf) {
        Ok(None) if buf.len() > MAX_MESSAGE => Err(PmiError::TooLong),
        other => other,
    }
}

/// Longest PMI message accepted (a PMI-2 message has at most 999999 bytes after its length).
pub const MAX_MESSAGE: usize = 1 << 20;

fn split_inner(buf: &[u8]) -> Result<Option<(Msg, usize)>, PmiError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf.starts_with(b"mcmd=") {
        return Ok(split_mcmd(buf).map(|n| (Msg::Opaque(buf[..n].to_vec()), n)));
    }
    if buf.starts_with(b"cmd=") || (buf.len() < 4 && b"cmd=".starts_with(buf)) || (buf.len() < 5 && b"mcmd=".starts_with(buf)) {
        let Some(nl) = buf.iter().position(|&c| c == b'\n') else { return Ok(None) };
        let line = std::str::from_utf8(&buf[..nl]).map_err(|_| PmiError::V1NotUtf8)?;
        return Ok(Some((Msg::Cmd { wire: Wire::V1, tokens: tokenize_v1(line) }, nl + 1)));
    }
    // PMI-2: six characters of decimal length (space padded).
    if buf.len() < 6 {
        if buf.iter().all(|c| c.is_ascii_digit() || *c == b' ') {
            return Ok(None);
        }
        return Err(PmiError::NotPmi(String::from_utf8_lossy(buf).into_owned()));
    }
    let len: usize = std::str::from_utf8(&buf[..6])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| PmiError::NotPmi(String::from_utf8_lossy(&buf[..buf.len().min(40)]).into_owned()))?;
    if buf.len() < 6 + len {
        return Ok(None);
    }
    let body = std::str::from_utf8(&buf[6..6 + len]).map_err(|_| PmiError::V2NotUtf8)?;
    if !body.starts_with("cmd=") {
        return Err(PmiError::NoCmd(body.into()));
    }
    Ok(Some((Msg::Cmd { wire: Wire::V2, tokens: tokenize_v2(body) }, 6 + len)))
}

fn split_mcmd(buf: &[u8]) -> Option<usize> {
    let mut total: Option<usize> = None;
    let mut sofar = 0usize;
    let mut pos = 0usize;
    // Positions count raw bytes: a lossy conversion of the whole buffer would change lengths.
    for line in buf.split_inclusive(|&c| c == b'\n') {
        if line.last() != Some(&b'\n') {
            return None;
        }
        pos += line.len();
        let text = String::from_utf8_lossy(line);
        let l = text.trim_end();
        if let Some(v) = l.strip_prefix("totspawns=") {
            total = v.parse().ok();
        } else if let Some(v) = l.strip_prefix("spawnssofar=") {
            sofar = v.parse().unwrap_or(0);
        } else if l == "endcmd" && total.is_none_or(|t| t == sofar) {
            return Some(pos);
        }
    }
    None
}

fn tokenize_v1(line: &str) -> Vec<(String, Option<String>)> {
    let mut tokens = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let ks = i;
        while i < b.len() && b[i] != b' ' && b[i] != b'=' {
            i += 1;
        }
        let key = line[ks..i].to_string();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            let vs = i;
            while i < b.len() && b[i] != b' ' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 2;
                } else {
                    i += 1;
                }
            }
            tokens.push((key, Some(line[vs..i.min(b.len())].to_string())));
        } else {
            tokens.push((key, None));
        }
    }
    tokens
}

fn tokenize_v2(body: &str) -> Vec<(String, Option<String>)> {
    body.split(';')
        .filter(|t| !t.is_empty())
        .map(|t| match t.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (t.to_string(), None),
        })
        .collect()
}

/// What the relay does with one request of the program.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this (possibly rewritten) request to the launcher; `await_reply` is false for
    /// commands that have none (`abort`).
    Forward { msg: Msg, await_reply: bool },
    /// Answer the program directly.
    Reply(Msg),
}

/// The per-rank rewriting state of the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The kvsname the program sees (the first launcher's).
    pub presented_kvsname: String,
    /// The current launcher's kvsname.
    pub real_kvsname: String,
}

impl Rules {
    pub fn key_prefix(generation: u32) -> String {
        if generation == 0 {
            String::new()
        } else {
            format!("g{generation}-")
        }
    }

    fn prefixed(key: &str, generation: u32) -> String {
        if key.starts_with("PMI_") || generation == 0 {
            key.to_string()
        } else {
            format!("{}{key}", Self::prefix_for(generation))
        }
    }

    fn prefix_for(generation: u32) -> String {
        Self::key_prefix(generation)
    }

    fn real_name(&self, name: &str) -> String {
        if name == self.presented_kvsname {
            self.real_kvsname.clone()
        } else {
            name.to_string()
        }
    }

    /// Decides what to do with a request of the program in lower-half generation `generation`.
    pub fn request(&self, msg: &Msg, generation: u32) -> Action {
        let Msg::Cmd { wire, .. } = msg else {
            return Action::Forward { msg: msg.clone(), await_reply: true };
        };
        let wire = *wire;
        let mut out = msg.clone();
        match msg.cmd() {
            "finalize" => {
                let reply = match wire {
                    Wire::V1 => Msg::new(Wire::V1, "finalize_ack").with("rc", 0),
                    Wire::V2 => Msg::new(Wire::V2, "finalize-response").with("rc", 0),
                };
                return Action::Reply(reply);
            }
            "abort" => return Action::Forward { msg: out, await_reply: false },
            "put" | "get" | "kvs-put" | "kvs-get" | "info-putnodeattr" | "info-getnodeattr" => {
                if let Some(k) = msg.get("key") {
                    out.set("key", &Self::prefixed(k, generation));
                }
            }
            _ => {}
        }
        for name_key in ["kvsname", "jobid"] {
            if let Some(v) = msg.get(name_key) {
                out.set(name_key, &self.real_name(v));
            }
        }
        Action::Forward { msg: out, await_reply: true }
    }

    /// Rewrites the launcher's response to `request` before the program sees it.
    pub fn response(&self, request: &Msg, mut resp: Msg) -> Msg {
        match request.cmd() {
            "get_my_kvsname" if resp.get("kvsname").is_some() => resp.set("kvsname", &self.presented_kvsname),
            "job-getid" if resp.get("jobid").is_some() => resp.set("jobid", &self.presented_kvsname),
            "get_maxes" => {
                if let Some(n) = resp.get("keylen_max").and_then(|v| v.parse::<usize>().ok()) {
                    resp.set("keylen_max", &n.saturating_sub(KEY_PREFIX_RESERVE).to_string());
                }
            }
            _ => {}
        }
        resp
    }
}

/// Whether a value is safe for PMI-1/PMI-2 as is (no spaces, `=`, `;`, backslashes or newlines).
#[cfg(test)]
pub fn is_plain_value(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|c| c.is_ascii_graphic() && !matches!(c, b'=' | b';' | b'\\'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Msg {
        let (m, n) = split(bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        m
    }

    #[test]
    fn v1_round_trip_keeps_order_and_escapes() {
        let line = b"cmd=put kvsname=kvs_1 key=-bcast-1-0 value=a\\ b\n";
        let m = one(line);
        assert_eq!(m.cmd(), "put");
        assert_eq!(m.get("value"), Some("a\\ b"));
        assert_eq!(m.encode(), line.to_vec());
    }

    #[test]
    fn v1_partial_line_needs_more() {
        assert_eq!(split(b"cmd=barrier_in").unwrap(), None);
        assert_eq!(split(b"cm").unwrap(), None);
    }

    #[test]
    fn v1_two_messages_in_one_buffer() {
        let buf = b"cmd=barrier_out\ncmd=get_result rc=0 value=x\n";
        let (a, n) = split(buf).unwrap().unwrap();
        assert_eq!(a.cmd(), "barrier_out");
        let (b, m) = split(&buf[n..]).unwrap().unwrap();
        assert_eq!(b.get("value"), Some("x"));
        assert_eq!(n + m, buf.len());
    }

    #[test]
    fn v2_round_trip() {
        let body = "cmd=kvs-put;key=k1;value=v1;";
        let wire = format!("{:>6}{body}", body.len());
        let m = one(wire.as_bytes());
        assert_eq!(m.wire(), Wire::V2);
        assert_eq!(m.get("key"), Some("k1"));
        assert_eq!(m.encode(), wire.into_bytes());
    }

    #[test]
    fn v2_partial_needs_more() {
        assert_eq!(split(b"    30cmd=").unwrap(), None);
        assert_eq!(split(b"3").unwrap(), None);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(split(b"hello world\n").is_err());
    }

    #[test]
    fn mcmd_spawn_is_opaque_until_endcmd() {
        let part = b"mcmd=spawn\ntotspawns=1\nspawnssofar=1\nexecname=a\n";
        assert_eq!(split(part).unwrap(), None);
        let mut full = part.to_vec();
        full.extend_from_slice(b"endcmd\n");
        let (m, n) = split(&full).unwrap().unwrap();
        assert_eq!(n, full.len());
        assert!(matches!(m, Msg::Opaque(_)));
    }

    #[test]
    fn mcmd_with_invalid_utf8_keeps_byte_positions() {
        // Found by the fuzzer: lengths of a lossy conversion were used as byte positions.
        let buf = b"mcmd=spawn\n\xff\xfe\nendcmd\n";
        let (m, n) = split(buf).unwrap().unwrap();
        assert_eq!(n, buf.len());
        assert_eq!(m, Msg::Opaque(buf.to_vec()));
    }

    fn rules() -> Rules {
        Rules { presented_kvsname: "kvs_old".into(), real_kvsname: "kvs_new".into() }
    }

    #[test]
    fn finalize_is_answered_locally() {
        let a = rules().request(&one(b"cmd=finalize\n"), 0);
        assert_eq!(a, Action::Reply(one(b"cmd=finalize_ack rc=0\n")));
        let body = "cmd=finalize;";
        let a = rules().request(&one(format!("{:>6}{body}", body.len()).as_bytes()), 3);
        let Action::Reply(r) = a else { panic!() };
        assert_eq!(r.cmd(), "finalize-response");
        assert_eq!(r.wire(), Wire::V2);
    }

    #[test]
    fn generation_zero_is_untouched_except_kvsname() {
        let m = one(b"cmd=put kvsname=kvs_old key=-bcast-1-0 value=2F\n");
        let Action::Forward { msg, await_reply } = rules().request(&m, 0) else { panic!() };
        assert!(await_reply);
        assert_eq!(msg.encode(), b"cmd=put kvsname=kvs_new key=-bcast-1-0 value=2F\n".to_vec());
    }

    #[test]
    fn later_generations_prefix_keys_but_not_launcher_attributes() {
        let m = one(b"cmd=get kvsname=kvs_old key=-allgather-shm-1-0\n");
        let Action::Forward { msg, .. } = rules().request(&m, 2) else { panic!() };
        assert_eq!(msg.get("key"), Some("g2--allgather-shm-1-0"));
        let m = one(b"cmd=get kvsname=kvs_old key=PMI_process_mapping\n");
        let Action::Forward { msg, .. } = rules().request(&m, 2) else { panic!() };
        assert_eq!(msg.get("key"), Some("PMI_process_mapping"));
        assert_eq!(msg.get("kvsname"), Some("kvs_new"));
    }

    #[test]
    fn abort_expects_no_reply() {
        let Action::Forward { await_reply, .. } = rules().request(&one(b"cmd=abort exitcode=3\n"), 0) else { panic!() };
        assert!(!await_reply);
    }

    #[test]
    fn responses_present_the_first_kvsname_and_shorter_keys() {
        let r = rules();
        let req = one(b"cmd=get_my_kvsname\n");
        let resp = r.response(&req, one(b"cmd=my_kvsname rc=0 kvsname=kvs_new\n"));
        assert_eq!(resp.encode(), b"cmd=my_kvsname rc=0 kvsname=kvs_old\n".to_vec());
        let req = one(b"cmd=get_maxes\n");
        let resp = r.response(&req, one(b"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"));
        assert_eq!(resp.get("keylen_max"), Some("56"));
    }

    #[test]
    fn prefix_fits_the_reserve() {
        assert!(Rules::key_prefix(99_999).len() <= KEY_PREFIX_RESERVE);
        assert_eq!(Rules::key_prefix(0), "");
    }

    #[test]
    fn plain_values() {
        assert!(is_plain_value("host,123,abcdef"));
        assert!(!is_plain_value("a b"));
        assert!(!is_plain_value("a=b"));
    }
}
