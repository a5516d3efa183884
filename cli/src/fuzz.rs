//! Property tests of every decoder that reads bytes from outside the keeper: control frames from
//! the agent, coordinator frames (and the handshake), PMI messages from the program, and the
//! files of a checkpoint directory (`job.json`, `MANIFEST.json`, `rank.json`,
//! `coordinator.json`). Arbitrary and mutated inputs must give a value or one clear error: no
//! panic, no hang, no unbounded allocation. A quick run by default; `PROPTEST_CASES=100000` for
//! a long one.

use crate::coord_wire::{AgentInfo, CkptResult, ClientRequest, CoordInfo, FromCoord, Hello, KeeperHello, LiveStatus, Mode, ToClient, ToCoord};
use crate::images::{self, FileSum, JobInfo, Manifest, RankManifest, RankMeta};
use crate::pmi::{self, Msg, Rules};
use mpicr_proto::{FromAgent, Timings};
use proptest::prelude::*;
use proptest::sample::Index;
use serde::Serialize;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c.failure_persistence = None;
    c
}

type Ops = Vec<(Index, u8, u8)>;

fn ops() -> impl Strategy<Value = Ops> {
    prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..8)
}

/// Replaces, inserts or deletes a byte, or truncates, at places chosen by the strategy.
fn mutate(mut b: Vec<u8>, ops: &[(Index, u8, u8)]) -> Vec<u8> {
    for (at, byte, op) in ops {
        match op % 5 {
            0 | 1 if !b.is_empty() => {
                let i = at.index(b.len());
                b[i] = *byte;
            }
            2 => {
                let i = at.index(b.len() + 1);
                b.insert(i, *byte);
            }
            3 if !b.is_empty() => {
                let i = at.index(b.len());
                b.remove(i);
            }
            _ => {
                let i = at.index(b.len() + 1);
                b.truncate(i);
            }
        }
    }
    b
}

fn pick<T: Clone>(v: &[T], i: &Index) -> T {
    v[i.index(v.len())].clone()
}

fn one_line(e: &str) {
    assert!(!e.is_empty() && !e.contains('\n'), "error is not one line: {e:?}");
}

fn frame<M: Serialize>(m: &M) -> Vec<u8> {
    let mut b = Vec::new();
    mpicr_proto::send(&mut b, m).unwrap();
    b
}

const SESSION: [u8; 32] = [5; 32];

// --- control frames (agent -> keeper) ------------------------------------------------------------

fn agent_frames() -> Vec<Vec<u8>> {
    let hello =
        mpicr_proto::Hello { rank: 1, size: 4, pid: 77, library: "/usr/lib/libmpich.so.12".into(), renew_strategy: "namespace".into(), renewals_left: Some(9) };
    let msgs = vec![
        FromAgent::Hello(hello),
        FromAgent::Request { stop: true },
        FromAgent::Counters { comms: vec![(1, 2), (3, 4)], groups: vec![(3, vec![0, 1])] },
        FromAgent::SendCounts { round: 0, sent: vec![(1, 0, 5), (2, -1, u64::MAX)], untold: vec![(3, 1)] },
        FromAgent::Wants { comms: vec![(1, 3)], groups: Vec::new() },
        FromAgent::ReadyToDump { drained_msgs: 1, drained_bytes: 2, state_bytes: 3, timings: Timings { phases_us: vec![("drain".into(), 9)] } },
        FromAgent::Resumed { timings: Timings { phases_us: vec![] } },
        FromAgent::Failed { reason: "open MPI file".into() },
        FromAgent::PmiConnect { generation: 3 },
        FromAgent::Drained,
    ];
    msgs.iter().map(frame).collect()
}

/// Decodes every frame of `buf` as the keeper's reader does; each step consumes bytes.
fn ctl_decode_all(buf: &[u8]) {
    let mut r = mpicr_proto::frame::Plain(buf);
    for _ in 0..buf.len() + 1 {
        match mpicr_proto::frame::read_frame(&mut r, 0).and_then(|f| f.map(|f| mpicr_proto::frame::decode::<FromAgent>(&f.body)).transpose()) {
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => return one_line(&e.to_string()),
        }
    }
    panic!("the frame reader made no progress");
}

// --- coordinator frames ------------------------------------------------------------------------------

fn rank_manifest() -> RankManifest {
    RankManifest {
        rank: 0,
        host: "node".into(),
        pid: 12,
        bytes: 3,
        files: vec![FileSum { name: "pages-1.img".into(), bytes: 3, blake3: "ab".into(), ..Default::default() }],
        renewals_left: Some(2),
        drained_msgs: 0,
        drained_bytes: 0,
        state_bytes: 0,
        dump_us: 4,
        agent_timings: vec![("a".into(), 1)],
    }
}

fn coord_frames() -> Vec<Vec<u8>> {
    coord_plain().into_iter().map(|p| p(&SESSION)).collect()
}

type Sealer = Box<dyn Fn(&[u8; 32]) -> Vec<u8>>;

fn sealed<M: Serialize + 'static>(m: M) -> Sealer {
    Box::new(move |k| crate::coord_wire::seal_bytes(&m, k, 0).unwrap())
}

fn coord_plain() -> Vec<Sealer> {
    let kh = KeeperHello { rank: 1, size: 2, job_id: "j".into(), host: "h".into(), keeper_pid: 1, program_pid: 2, mode: Mode::Agent, restart_epoch: Some(3) };
    let info = AgentInfo { library: "l".into(), renew_strategy: "sessions".into(), renewals_left: None };
    let mut out = vec![
        sealed(Hello::Keeper(kh)),
        sealed(Hello::Client(ClientRequest::Checkpoint { stop: false, timeout_ms: 1000 })),
        sealed(Hello::Client(ClientRequest::Status)),
        sealed(ToCoord::AgentHello(info.clone())),
        sealed(ToCoord::Counters { epoch: 1, comms: vec![(5, 6)], groups: vec![(5, vec![1, 2])] }),
        sealed(ToCoord::SendCounts { epoch: 1, round: 2, sent: vec![(5, 1, 2)], untold: vec![(6, 0)] }),
        sealed(ToCoord::Wants { epoch: 1, comms: vec![(5, 7)], groups: Vec::new() }),
        sealed(ToCoord::ReadyToDump { epoch: 1, drained_msgs: 1, drained_bytes: 2, state_bytes: 3, timings: vec![] }),
        sealed(ToCoord::Dumped { epoch: 1, info: rank_manifest() }),
        sealed(ToCoord::Failed { epoch: 1, reason: "x".into() }),
        sealed(ToCoord::Exiting { status: "exit code 0".into() }),
        sealed(FromCoord::Welcome { job_id: "j".into() }),
        sealed(FromCoord::Targets { epoch: 2, round: 1, comms: vec![(1, 1)], groups: vec![(3, 2)] }),
        sealed(FromCoord::Expected { epoch: 2, expect: vec![(1, 0, 1)] }),
        sealed(FromCoord::Abort { epoch: 2, reason: "r".into() }),
        sealed(FromCoord::Stop),
        sealed(FromCoord::Release { epoch: 2 }),
        sealed(FromCoord::NodeDumped { epoch: 2 }),
        sealed(ToCoord::Drained { epoch: 2 }),
        sealed(ToClient::Done(CkptResult { epoch: 1, stop_time_us: 2, mpi_back_us: Some(5), bytes: 3, ranks: 4, stopped: true })),
        sealed(ToClient::Error("e".into())),
        sealed(ToClient::Started { epoch: 7 }),
        sealed(ToClient::Queued("q".into())),
    ];
    out.push(sealed(ToClient::Status(LiveStatus {
        job_id: "j".into(),
        size: 2,
        registered: vec![0, 1],
        agents: vec![(0, info)],
        in_progress: Some(1),
        restart_pending: None,
    })));
    out
}

/// Reads authenticated frames of every coordinator message type from `buf` until the end or an
/// error; returns how many frames of the first type passed authentication.
fn coord_decode_all(buf: &[u8]) -> u64 {
    fn each<M: for<'de> serde::Deserialize<'de>>(buf: &[u8]) -> u64 {
        let mut seq = 0;
        let mut r = buf;
        // One frame per call: the remaining bytes are what follows it.
        for _ in 0..buf.len() + 1 {
            let before = seq;
            match crate::coord_wire::open_bytes::<M>(r, &SESSION, &mut seq) {
                Ok(Some(_)) => {
                    let used = 4 + u32::from_le_bytes(r[..4].try_into().unwrap()) as usize + 32;
                    assert_eq!(seq, before + 1);
                    r = &r[used..];
                }
                Ok(None) => return seq,
                Err(e) => {
                    one_line(&e.to_string());
                    return seq;
                }
            }
        }
        panic!("open_bytes made no progress");
    }
    let n = each::<Hello>(buf);
    each::<ToCoord>(buf);
    each::<FromCoord>(buf);
    each::<ToClient>(buf);
    n
}

// --- PMI from the program ----------------------------------------------------------------------------

fn pmi_samples() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [
        "cmd=init pmi_version=1 pmi_subversion=1\n",
        "cmd=get_maxes\n",
        "cmd=put kvsname=kvs_1 key=P0-businesscard value=description#host$port#1$\n",
        "cmd=get kvsname=kvs_1 key=P1-businesscard\n",
        "cmd=barrier_in\n",
        "cmd=finalize\n",
        "cmd=abort exitcode=3\n",
        "cmd=put kvsname=kvs key=a\\ b value=x\\=y\n",
        "mcmd=spawn\nnprocs=1\nexecname=/bin/true\ntotspawns=1\nspawnssofar=1\nendcmd\n",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for body in ["cmd=fullinit;pmirank=0;", "cmd=kvs-put;key=k;value=v;", "cmd=kvs-get;jobid=kvs_1;srcid=-1;key=k;", "cmd=finalize;"] {
        out.push(format!("{:>6}{body}", body.len()).into_bytes());
    }
    out
}

/// Splits every message off `buf` as the relay does, and runs the relay's rewriting on each.
fn pmi_all(mut buf: &[u8]) {
    let rules = Rules { presented_kvsname: "kvs_1".into(), real_kvsname: "kvs_2".into() };
    for _ in 0..buf.len() + 1 {
        match pmi::split(buf) {
            Ok(Some((msg, used))) => {
                assert!(used > 0 && used <= buf.len(), "consumed {used} of {}", buf.len());
                buf = &buf[used..];
                for generation in [0, 1, u32::MAX] {
                    let _ = rules.request(&msg, generation);
                }
                let _ = rules.response(&msg, msg.clone());
                let _ = msg.encode();
                let _ = msg.to_string();
            }
            Ok(None) => return,
            Err(e) => return one_line(&e.to_string()),
        }
    }
    panic!("pmi::split made no progress");
}

// --- files of the checkpoint directory -----------------------------------------------------------------

fn job() -> JobInfo {
    JobInfo {
        format: images::FORMAT,
        job_id: "0123456789abcdef".into(),
        ranks: 2,
        program: "/bin/sim".into(),
        argv: vec!["sim".into(), "in.dat".into()],
        cwd: "/home/u".into(),
        created_unix: 1,
        mode: "mpi".into(),
        kvsname: Some("kvs_1".into()),
        pmi_version: None,
        mpi_library: Some("/usr/lib/libmpich.so.12".into()),
        renew_strategy: Some("namespace".into()),
        mpicr_version: "0.1.0".into(),
    }
}

const KEY: [u8; images::KEY_LEN] = [7; images::KEY_LEN];

fn manifest() -> Manifest {
    let mut m = Manifest {
        format: images::FORMAT,
        job_id: "0123456789abcdef".into(),
        epoch: 3,
        ranks: 2,
        created_unix: 5,
        stop: false,
        total_bytes: 6,
        stop_time_us: 7,
        mpi_back_us: None,
        timings: vec![("counters".into(), 1)],
        rank_info: vec![rank_manifest(), RankManifest { rank: 1, ..rank_manifest() }],
        mac: None,
    };
    m.sign(&KEY);
    m
}

fn file_samples() -> Vec<Vec<u8>> {
    let meta = RankMeta {
        format: images::FORMAT,
        job_id: "j".into(),
        epoch: 1,
        rank: 0,
        size: 1,
        host: "h".into(),
        pid: 5,
        tids: vec![5, 6],
        pidns: true,
        init_dir: None,
        lower_env: vec!["UCX_TLS".into()],
        launcher_vars: vec!["PMIX_RANK".into()],
        sockets: vec![images::ExternalSocket { fds: vec![3], ino: 9, role: "ctl".into() }],
        pipes: vec![images::ExternalPipe { fds: vec![1], ino: 10, stream: "stdout".into() }],
        next_generation: 1,
        agent: true,
        agent_hello: None,
        app: None,
        parent_epoch: None,
    };
    let coord = CoordInfo { job_id: "j".into(), host: "h".into(), port: 1, secret: "00".repeat(32), pid: 2, bind: Some("127.0.0.1".into()) };
    vec![
        serde_json::to_vec_pretty(&job()).unwrap(),
        serde_json::to_vec_pretty(&manifest()).unwrap(),
        serde_json::to_vec_pretty(&meta).unwrap(),
        serde_json::to_vec_pretty(&coord).unwrap(),
    ]
}

/// Parses `bytes` as every file of the directory; a manifest that parses is verified.
fn files_all(bytes: &[u8]) {
    let check = |r: anyhow::Result<()>| {
        if let Err(e) = r {
            one_line(&format!("{e:#}"));
        }
    };
    check(images::parse_json::<JobInfo>(bytes).map(|_| ()));
    check(images::parse_json::<RankMeta>(bytes).map(|_| ()));
    check(images::parse_json::<CoordInfo>(bytes).and_then(|c| c.secret_bytes().map(|_| ())));
    match images::parse_json::<Manifest>(bytes) {
        Ok(m) => {
            if let Err(e) = m.verify(&KEY) {
                one_line(&e.to_string());
            }
            let _ = m.check_sane();
        }
        Err(e) => one_line(&format!("{e:#}")),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ctl_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        ctl_decode_all(&bytes);
    }

    #[test]
    fn ctl_mutated(i in any::<Index>(), ops in ops()) {
        let all: Vec<u8> = agent_frames().concat();
        ctl_decode_all(&mutate(pick(&agent_frames(), &i), &ops));
        ctl_decode_all(&mutate(all, &ops));
    }

    #[test]
    fn coord_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        coord_decode_all(&bytes);
    }

    #[test]
    fn coord_mutated(i in any::<Index>(), ops in ops()) {
        let good = pick(&coord_frames(), &i);
        let bad = mutate(good.clone(), &ops);
        coord_decode_all(&bad);
        // A changed frame never passes authentication (a truncated one just ends the stream).
        if bad != good && bad.len() >= good.len() {
            let mut seq = 0;
            let r = crate::coord_wire::open_bytes::<serde::de::IgnoredAny>(&bad, &SESSION, &mut seq);
            prop_assert!(!matches!(r, Ok(Some(_))) || bad[..good.len()] == good[..]);
        }
    }

    /// A frame sealed with another key, or for another place in the stream, is refused.
    #[test]
    fn coord_wrong_key_or_place(i in any::<Index>(), key in any::<[u8; 32]>(), seq in 1u64.., epoch in any::<u64>()) {
        let plain = coord_plain();
        let m = &plain[i.index(plain.len())];
        let mut s = 0;
        prop_assert!(crate::coord_wire::open_bytes::<serde::de::IgnoredAny>(&m(&key), &SESSION, &mut s).is_err() || key == SESSION);
        let late = crate::coord_wire::seal_bytes(&FromCoord::Dump { epoch }, &SESSION, seq).unwrap();
        prop_assert!(crate::coord_wire::open_bytes::<FromCoord>(&late, &SESSION, &mut s).is_err());
        prop_assert_eq!(s, 0);
    }

    #[test]
    fn pmi_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        pmi_all(&bytes);
    }

    #[test]
    fn pmi_text(s in "(cmd=|mcmd=|[ 0-9]{6}cmd=)?[a-z_=; \\\\\n0-9é-]{0,80}") {
        pmi_all(s.as_bytes());
    }

    #[test]
    fn pmi_mutated(i in any::<Index>(), ops in ops()) {
        pmi_all(&mutate(pick(&pmi_samples(), &i), &ops));
    }

    #[test]
    fn pmi_coordinator_value(s in "[a-z0-9,:.]{0,60}") {
        if let Err(e) = CoordInfo::from_pmi_value(&s) {
            one_line(&format!("{e:#}"));
        }
    }

    #[test]
    fn files_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        files_all(&bytes);
    }

    #[test]
    fn files_mutated(i in any::<Index>(), ops in ops()) {
        files_all(&mutate(pick(&file_samples(), &i), &ops));
    }

    /// Any change to a signed manifest's values is caught by its signature.
    #[test]
    fn manifest_changes_break_the_signature(total in any::<u64>(), name in "[a-z./]{1,12}", rank in any::<i32>()) {
        let good = manifest();
        prop_assert!(good.verify(&KEY).is_ok());
        let mut m = good.clone();
        m.total_bytes = total;
        prop_assert_eq!(m.verify(&KEY).is_ok(), total == good.total_bytes);
        let mut m = good.clone();
        m.rank_info[0].files[0].name = name.clone();
        prop_assert_eq!(m.verify(&KEY).is_ok(), name == good.rank_info[0].files[0].name);
        let mut m = good.clone();
        m.rank_info[1].rank = rank;
        prop_assert_eq!(m.verify(&KEY).is_ok(), rank == 1);
    }
}

/// The handshake answers garbage from an unauthenticated peer with an error, within its deadline.
#[test]
fn handshake_garbage() {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 24, ..config() });
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..100), |bytes| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                crate::coord_wire::accept_handshake(s, &[1; 32], std::time::Instant::now() + crate::coord_wire::HANDSHAKE_TIMEOUT).map(drop)
            });
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let _ = c.write_all(&bytes);
            drop(c);
            let r = server.join().unwrap();
            prop_assert!(r.is_err());
            Ok(())
        })
        .unwrap();
    // And a client facing a garbage server.
    runner
        .run(&prop::collection::vec(any::<u8>(), 0..100), |bytes| {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let _ = s.write_all(&bytes);
            });
            let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let r = crate::coord_wire::connect_handshake(c, &[1; 32], crate::coord_wire::HANDSHAKE_TIMEOUT).map(drop);
            server.join().unwrap();
            prop_assert!(r.is_err());
            Ok(())
        })
        .unwrap();
}

/// A PMI peer that never ends its line is cut off, instead of growing the buffer forever.
#[test]
fn endless_pmi_line_is_refused() {
    let mut buf = b"cmd=put value=".to_vec();
    buf.resize(pmi::MAX_MESSAGE + 1, b'x');
    assert!(pmi::split(&buf).unwrap_err().to_string().contains("longer than"));
    let _ = Msg::new(pmi::Wire::V1, "x");
}
