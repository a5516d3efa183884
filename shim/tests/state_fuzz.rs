//! `shim.state` (postcard) read back from disk: arbitrary and mutated bytes must decode to a
//! value or one error, never a panic, a hang or a huge allocation. A quick run by default;
//! `PROPTEST_CASES=100000` for a long one.
use mpicr_shim::core::checkpoint::StateFile;
use proptest::prelude::*;
use proptest::sample::Index;

fn config() -> ProptestConfig {
    let mut c = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        c.cases = 256;
    }
    c.failure_persistence = None;
    c
}

fn sample() -> Vec<u8> {
    let mut drained = mpicr_drain::Buffer::default();
    drained.push(mpicr_drain::Message { comm: 7, source: 1, tag: 3, data: vec![1, 2, 3, 4] });
    drained.push(mpicr_drain::Message { comm: u64::MAX, source: -1, tag: 0, data: vec![] });
    let s = StateFile {
        format: mpicr_shim::core::checkpoint::STATE_FORMAT,
        epoch: 4,
        world_rank: 1,
        world_size: 2,
        generation: 3,
        comms: vec![],
        groups: vec![],
        datatypes: vec![],
        ops: vec![],
        infos: vec![],
        requests: vec![],
        keyvals: vec![],
        errhandlers: vec![],
        files: vec![(
            0,
            0,
            mpicr_shim::core::kinds::file::FileEntry::new(
                mpicr_virtid::VErrhandler::from_int(0),
                "/tmp/f",
                9,
                mpicr_virtid::VComm::from_int(3),
                42,
                vec![("cb_nodes".into(), "1".into())],
            ),
        )],
        wins: vec![],
        drained,
        user_errors: vec![],
        face: vec![1, 0, 0, 0, 0, 0, 0, 0],
    };
    postcard::to_stdvec(&s).unwrap()
}

fn decode(bytes: &[u8]) {
    if let Err(e) = postcard::from_bytes::<StateFile>(bytes) {
        let e = e.to_string();
        assert!(!e.is_empty() && !e.contains('\n'));
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        decode(&bytes);
    }

    #[test]
    fn mutated_state(ops in prop::collection::vec((any::<Index>(), any::<u8>(), any::<u8>()), 1..8)) {
        let mut b = sample();
        for (at, byte, op) in ops {
            match op % 4 {
                0 if !b.is_empty() => { let i = at.index(b.len()); b[i] = byte; }
                1 => { let i = at.index(b.len() + 1); b.insert(i, byte); }
                2 if !b.is_empty() => { let i = at.index(b.len()); b.remove(i); }
                _ => { let i = at.index(b.len() + 1); b.truncate(i); }
            }
        }
        decode(&b);
    }
}

#[test]
fn sample_round_trips() {
    let s: StateFile = postcard::from_bytes(&sample()).unwrap();
    assert_eq!((s.epoch, s.world_rank, s.world_size), (4, 1, 2));
}
