//! A stand-in for a program running under libmpicr.so, to test the keeper and coordinator without
//! the shim: it speaks the control protocol (`mpicr_proto`) the way the agent does, and each
//! "lower half" generation is a PMI business-card exchange through the keeper's relay (init,
//! put, barrier, get of every peer's card, finalize), so key prefixing and generation counting
//! are checked across checkpoints and restarts.
//!
//! Usage (under a keeper): `mpiexec -n N mpicr run -- fake_agent TICKS [--close-pmi]`
//! `--close-pmi` behaves like MPICH 4.0.2, which shuts its PMI socket down at finalize: every
//! renewal then hands the keeper a new connection (`PmiConnect`). Without it, the socket stays
//! open across generations, like MPICH 5.x.
//! `--fail-at E`: rank 1 answers the targets of epoch E with `Failed` (an aborted checkpoint);
//! `--ignore-at E`: rank 1 ignores the checkpoint request of epoch E (a coordinator timeout);
//! `--fail-drain-at E`: rank 1 answers the expected receives of epoch E with `Failed` while the
//! others drained: nobody may release (a renewal is a PMI barrier, so one would hang).
//! `--exit-after-dump`: after the first checkpoint's resume (not a restart's) the program releases
//! its lower half and exits 0 at once, while its keeper may still be sealing the images.
//! Output: `rank R tick I gen G`, one line per tick; exit status 0, or 1 on any inconsistency.

use mpicr_proto::{FromAgent, Hello, Timings, ToAgent};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, IntoRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
}

impl Gate {
    fn set(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.cv.notify_all();
    }
    fn wait_open(&self) {
        let mut g = self.open.lock().unwrap();
        while !*g {
            g = self.cv.wait(g).unwrap();
        }
    }
}

struct LowerHalf {
    rank: i32,
    size: i32,
    pmi_fd: Option<RawFd>,
    close_pmi: bool,
    /// Generation of the current (or last) lower half.
    gen: u32,
    /// Whether the lower half is initialised.
    live: bool,
    /// Whether the PMI socket at `pmi_fd` is usable.
    pmi_open: bool,
}

fn die(msg: &str) -> ! {
    say(&format!("fake_agent: {msg}"));
    std::process::exit(1)
}

fn pmi_call(fd: RawFd, line: &str) -> String {
    // SAFETY: the descriptor stays owned by the process; ManuallyDrop keeps it open.
    let s = std::mem::ManuallyDrop::new(unsafe { UnixStream::from_raw_fd(fd) });
    let mut w: &UnixStream = &s;
    w.write_all(line.as_bytes()).unwrap_or_else(|e| die(&format!("PMI write: {e}")));
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let mut r: &UnixStream = &s;
        match r.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => out.push(byte[0]),
            _ => die(&format!("PMI connection closed during {line:?}")),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn field<'a>(resp: &'a str, key: &str) -> Option<&'a str> {
    resp.split(' ').find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

impl LowerHalf {
    /// "MPI_Init": a business-card exchange through PMI.
    fn init(&mut self, gen: u32) {
        self.gen = gen;
        self.live = true;
        let Some(fd) = self.pmi_fd else { return };
        let r = pmi_call(fd, "cmd=init pmi_version=1 pmi_subversion=1\n");
        if !r.contains("response_to_init") {
            die(&format!("bad init answer {r:?}"));
        }
        let kvs = pmi_call(fd, "cmd=get_my_kvsname\n");
        let kvs = field(&kvs, "kvsname").unwrap_or_else(|| die("no kvsname")).to_string();
        let card = format!("g{gen}-r{}", self.rank);
        let r = pmi_call(fd, &format!("cmd=put kvsname={kvs} key=card-{} value={card}\n", self.rank));
        if field(&r, "rc").is_some_and(|rc| rc != "0") {
            die(&format!("put failed: {r}"));
        }
        pmi_call(fd, "cmd=barrier_in\n");
        for peer in 0..self.size {
            let r = pmi_call(fd, &format!("cmd=get kvsname={kvs} key=card-{peer}\n"));
            let want = format!("g{gen}-r{peer}");
            if field(&r, "value") != Some(want.as_str()) {
                die(&format!("generation {gen}: card of rank {peer} is {r:?}, expected value={want}"));
            }
        }
        pmi_call(fd, "cmd=barrier_in\n");
    }

    /// "MPI_Finalize".
    fn release(&mut self) {
        if !self.live {
            return;
        }
        self.live = false;
        let Some(fd) = self.pmi_fd else { return };
        let r = pmi_call(fd, "cmd=finalize\n");
        if !r.contains("finalize_ack") {
            die(&format!("bad finalize answer {r:?}"));
        }
        if self.close_pmi {
            // SAFETY: shutting down and closing our own descriptor, as MPICH does.
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
                libc::close(fd);
            }
            self.pmi_open = false;
        }
    }

    /// A new PMI connection from the keeper for `gen`, installed at the PMI_FD number.
    fn reconnect(&mut self, ctl: &UnixStream, gen: u32) {
        let Some(fd) = self.pmi_fd else { return };
        let (mine, theirs) = UnixStream::pair().unwrap_or_else(|e| die(&format!("socketpair: {e}")));
        mpicr_proto::send_with_fd(ctl, &FromAgent::PmiConnect { generation: gen }, std::os::fd::AsFd::as_fd(&theirs))
            .unwrap_or_else(|e| die(&format!("PmiConnect: {e}")));
        drop(theirs);
        let raw = mine.into_raw_fd();
        // SAFETY: dup2 onto the PMI_FD number, then close the temporary number.
        unsafe {
            libc::dup2(raw, fd);
            libc::close(raw);
        }
        self.pmi_open = true;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ticks: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let close_pmi = args.iter().any(|a| a == "--close-pmi");
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse::<u64>().ok());
    let faults = Faults {
        fail_at: opt("--fail-at"),
        ignore_at: opt("--ignore-at"),
        fail_drain_at: opt("--fail-drain-at"),
        exit_after_dump: args.iter().any(|a| a == "--exit-after-dump"),
    };
    let env_i = |k: &str, d: i32| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let rank = env_i("PMI_RANK", 0);
    let size = env_i("PMI_SIZE", 1);
    let ctl_fd = env_i(mpicr_proto::CTL_FD_ENV, -1);
    if ctl_fd < 0 {
        die("MPICR_CTL_FD is not set: run me under `mpicr run`");
    }
    let pmi_fd = std::env::var("PMI_FD").ok().and_then(|v| v.parse().ok());
    // SAFETY: the keeper handed us this descriptor; we own it from here on.
    let ctl = unsafe { UnixStream::from_raw_fd(ctl_fd) };
    let lh = Arc::new(Mutex::new(LowerHalf { rank, size, pmi_fd, close_pmi, gen: 0, live: false, pmi_open: pmi_fd.is_some() }));
    let gate = Arc::new(Gate { open: Mutex::new(true), cv: Condvar::new() });
    lh.lock().unwrap().init(0);
    // `--hello-after-ms MS [--hello-rank R]`: the program initialises MPI late (on rank R only).
    if let Some(ms) = opt("--hello-after-ms") {
        if opt("--hello-rank").is_none_or(|r| r == rank as u64) {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
    let hello = Hello {
        rank,
        size,
        pid: std::process::id(),
        library: "fake".into(),
        renew_strategy: if close_pmi { "namespace".into() } else { "sessions".into() },
        renewals_left: close_pmi.then_some(10),
    };
    mpicr_proto::send(&mut &ctl, &FromAgent::Hello(hello)).unwrap_or_else(|e| die(&format!("Hello: {e}")));
    {
        let lh = Arc::clone(&lh);
        let gate = Arc::clone(&gate);
        std::thread::spawn(move || agent(ctl, lh, gate, rank, size, faults));
    }
    let out = std::io::stdout();
    for i in 1..=ticks {
        gate.wait_open();
        let gen = lh.lock().unwrap().gen;
        writeln!(out.lock(), "rank {rank} tick {i} gen {gen}").unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    gate.wait_open();
    lh.lock().unwrap().release();
}

#[derive(Clone, Copy)]
struct Faults {
    fail_at: Option<u64>,
    ignore_at: Option<u64>,
    fail_drain_at: Option<u64>,
    exit_after_dump: bool,
}

fn agent(ctl: UnixStream, lh: Arc<Mutex<LowerHalf>>, gate: Arc<Gate>, rank: i32, size: i32, faults: Faults) {
    let mut r = &ctl;
    let mut epoch = 0u64;
    let mut t0 = Instant::now();
    let mut drained = 0u64;
    loop {
        let msg: ToAgent = match mpicr_proto::recv(&mut r) {
            Ok(Some(m)) => m,
            Ok(None) => die("the keeper closed the control socket"),
            Err(e) => die(&format!("control socket: {e}")),
        };
        let send = |m: FromAgent| mpicr_proto::send(&mut &ctl, &m).unwrap_or_else(|e| die(&format!("send: {e}")));
        match msg {
            ToAgent::Checkpoint { epoch: e, .. } => {
                epoch = e;
                if rank == 1 && faults.ignore_at == Some(e) {
                    continue;
                }
                t0 = Instant::now();
                gate.set(false);
                send(FromAgent::Counters { comms: vec![(42, rank as u64)], groups: Vec::new() });
            }
            ToAgent::Targets { round, comms, .. } => {
                if rank == 1 && faults.fail_at == Some(epoch) {
                    send(FromAgent::Failed { reason: format!("injected failure in epoch {epoch}") });
                    continue;
                }
                // Round 0 targets the highest counter (size - 1); rank 0 then needs one more
                // collective (as a rank behind a broadcast's root does), so round 1 raises the
                // target to `size` for everybody, and the round-0 send counts of the others are
                // superseded.
                let want = if round == 0 { size - 1 } else { size };
                if comms != vec![(42, want as u64)] || round > 1 {
                    send(FromAgent::Failed { reason: format!("bad targets {comms:?} in round {round}") });
                    continue;
                }
                if round == 0 && rank == 0 {
                    send(FromAgent::Wants { comms: vec![(42, size as u64)], groups: Vec::new() });
                    continue;
                }
                let sent = (0..size).filter(|&d| d != rank).map(|d| (7u64, d, epoch * 100 + rank as u64)).collect();
                send(FromAgent::SendCounts { round, sent, untold: Vec::new() });
            }
            ToAgent::ExpectedRecvs { expect } => {
                let want: Vec<(u64, i32, u64)> = (0..size).filter(|&s| s != rank).map(|s| (7u64, s, epoch * 100 + s as u64)).collect();
                if expect != want {
                    send(FromAgent::Failed { reason: format!("expected {want:?}, got {expect:?}") });
                    continue;
                }
                if rank == 1 && faults.fail_drain_at == Some(epoch) {
                    send(FromAgent::Failed { reason: format!("injected drain failure in epoch {epoch}") });
                    continue;
                }
                drained = expect.len() as u64;
                send(FromAgent::Drained);
            }
            ToAgent::Release => {
                lh.lock().unwrap().release();
                send(FromAgent::ReadyToDump {
                    drained_msgs: drained,
                    drained_bytes: 0,
                    state_bytes: 0,
                    timings: Timings { phases_us: vec![("drain".into(), t0.elapsed().as_micros() as u64)] },
                });
            }
            ToAgent::Resume { restarted, epoch: e, size: s, .. } => {
                if s != size {
                    die(&format!("resumed with size {s}, was {size}"));
                }
                let t = Instant::now();
                let mut l = lh.lock().unwrap();
                let gen = l.gen + 1;
                if !l.pmi_open {
                    l.reconnect(&ctl, gen);
                }
                l.init(gen);
                drop(l);
                say(&format!("fake_agent[{rank}]: resumed (restarted={restarted}, epoch {e}, generation {gen})"));
                let renewed = FromAgent::Resumed { timings: Timings { phases_us: vec![("renew".into(), t.elapsed().as_micros() as u64)] } };
                if faults.exit_after_dump && !restarted {
                    // The gate stays closed: no tick past the image is printed twice.
                    send(renewed);
                    say(&format!("fake_agent[{rank}]: exiting right after the dump of epoch {e}"));
                    lh.lock().unwrap().release();
                    std::process::exit(0);
                }
                gate.set(true);
                send(renewed);
            }
            ToAgent::Abort { reason } => {
                let mut l = lh.lock().unwrap();
                say(&format!("fake_agent[{rank}]: checkpoint aborted ({}): {reason}", if l.live { "not released" } else { "released: renewing" }));
                if !l.live {
                    let gen = l.gen + 1;
                    if !l.pmi_open {
                        l.reconnect(&ctl, gen);
                    }
                    l.init(gen);
                }
                drop(l);
                gate.set(true);
            }
        }
    }
}

/// One line on stderr in one write: the ranks share the file, and `eprintln!` writes a line in
/// pieces, which another rank's line could split (the tests grep these lines).
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}
