//! Recipes: what each virtual object needs to be rebuilt on a fresh MPI library.
//!
//! Recipes are self-contained values: a datatype's recipe embeds the recipes of the types it
//! was built from (the program may free those), a communicator's is its group as world ranks.
//! Mutable properties (names, info keys) are read back at checkpoint time rather than tracked
//! call by call.

use crate::handles::{VComm, VDatatype, VInfo, VOp};
use serde::{Deserialize, Serialize};

/// A communicator's job-wide identity, equal on every member.
pub type CommGid = u64;

/// How a communicator came to be, and what it takes to make it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommRecipe {
    pub gid: CommGid,
    /// The local group, as ranks in MPI_COMM_WORLD, in local rank order.
    pub world_ranks: Vec<i32>,
    /// For an intercommunicator, the remote group as world ranks.
    pub remote_world_ranks: Option<Vec<i32>>,
    pub topology: Topology,
    /// The MPI function that created it (for `mpicr inspect` and error messages).
    pub made_by: String,
    pub parent: Option<CommGid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Topology {
    #[default]
    None,
    Cart {
        dims: Vec<i32>,
        periods: Vec<i32>,
    },
    Graph {
        index: Vec<i32>,
        edges: Vec<i32>,
    },
    DistGraph {
        sources: Vec<i32>,
        source_weights: Option<Vec<i32>>,
        destinations: Vec<i32>,
        dest_weights: Option<Vec<i32>>,
    },
}

/// 64-bit mixing (splitmix64 finaliser): cheap, deterministic across processes and builds.
pub fn mix(mut h: u64, v: u64) -> u64 {
    h ^= v.wrapping_add(0x9E37_79B9_7F4A_7C15).wrapping_add(h << 6).wrapping_add(h >> 2);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// Global id of MPI_COMM_WORLD and MPI_COMM_SELF of world rank `r`.
pub const WORLD_GID: CommGid = 1;
pub fn self_gid(world_rank: i32) -> CommGid {
    mix(2, world_rank as u64)
}

/// The id of a communicator made by a collective call on `parent`: every member computes it
/// from values they all share (the parent's id, how many collectives the parent had seen, and
/// the new group), so it agrees across ranks and differs between the colours of a split.
pub fn child_gid(parent: CommGid, parent_seq: u64, world_ranks: &[i32], remote: Option<&[i32]>) -> CommGid {
    let mut h = mix(parent, parent_seq);
    for &r in world_ranks {
        h = mix(h, r as u64);
    }
    if let Some(remote) = remote {
        h = mix(h, u64::MAX);
        for &r in remote {
            h = mix(h, r as u64);
        }
    }
    h.max(3)
}

/// A datatype, predefined or derived. Derived ones embed their constructor; `Predefined` holds
/// a handle as the core knows it (one of the core's predefined datatypes, or a value nobody
/// made; arguments of a pending operation may hold a derived type's virtual handle there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TypeRef {
    Predefined(VDatatype),
    Derived(Box<TypeRecipe>),
}

/// Constructors of derived datatypes, with their arguments (large-count variants widen to i64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TypeRecipe {
    Contiguous {
        count: i64,
        old: TypeRef,
    },
    Vector {
        count: i64,
        blocklen: i64,
        stride: i64,
        old: TypeRef,
    },
    Hvector {
        count: i64,
        blocklen: i64,
        stride: i64,
        old: TypeRef,
    },
    Indexed {
        blocklens: Vec<i64>,
        displs: Vec<i64>,
        old: TypeRef,
    },
    Hindexed {
        blocklens: Vec<i64>,
        displs: Vec<i64>,
        old: TypeRef,
    },
    IndexedBlock {
        blocklen: i64,
        displs: Vec<i64>,
        old: TypeRef,
    },
    HindexedBlock {
        blocklen: i64,
        displs: Vec<i64>,
        old: TypeRef,
    },
    Struct {
        blocklens: Vec<i64>,
        displs: Vec<i64>,
        types: Vec<TypeRef>,
    },
    Subarray {
        sizes: Vec<i64>,
        subsizes: Vec<i64>,
        starts: Vec<i64>,
        order: i32,
        old: TypeRef,
    },
    Darray {
        size: i32,
        rank: i32,
        gsizes: Vec<i64>,
        distribs: Vec<i32>,
        dargs: Vec<i32>,
        psizes: Vec<i32>,
        order: i32,
        old: TypeRef,
    },
    Resized {
        lb: i64,
        extent: i64,
        old: TypeRef,
    },
    Dup {
        old: TypeRef,
    },
    /// `MPI_Type_create_f90_*` and `MPI_Type_match_size` results are predefined-like; kept for
    /// completeness of `Type_get_envelope`.
    Named {
        combiner: i32,
        args: Vec<i64>,
    },
}

impl TypeRecipe {
    /// The datatypes this one was built from.
    pub fn inputs(&self) -> Vec<&TypeRef> {
        use TypeRecipe::*;
        match self {
            Contiguous { old, .. }
            | Vector { old, .. }
            | Hvector { old, .. }
            | Indexed { old, .. }
            | Hindexed { old, .. }
            | IndexedBlock { old, .. }
            | HindexedBlock { old, .. }
            | Subarray { old, .. }
            | Darray { old, .. }
            | Resized { old, .. }
            | Dup { old } => vec![old],
            Struct { types, .. } => types.iter().collect(),
            Named { .. } => vec![],
        }
    }

    /// Depth of the constructor tree (1 for a type built only from predefined ones).
    pub fn depth(&self) -> usize {
        1 + self
            .inputs()
            .into_iter()
            .map(|t| match t {
                TypeRef::Predefined(_) => 0,
                TypeRef::Derived(r) => r.depth(),
            })
            .max()
            .unwrap_or(0)
    }
}

/// A derived datatype's entry: its recipe and whether the program committed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatatypeEntry {
    pub recipe: TypeRecipe,
    pub committed: bool,
}

/// A group, as world ranks (MPI_UNDEFINED ranks cannot occur: groups are subsets of the job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecipe {
    pub world_ranks: Vec<i32>,
}

/// A user-defined reduction: the program's function and whether it commutes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpRecipe {
    /// Address of the user function in the program (valid after a CRIU restore: same memory).
    pub function: u64,
    pub commute: bool,
    /// Created by `MPI_Op_create_c` (large-count signature).
    pub large_count: bool,
}

/// Info objects: their keys and values, read back at checkpoint time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct InfoRecipe {
    pub entries: Vec<(String, String)>,
}

/// The envelope and buffer of a point-to-point operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pArgs {
    pub buf: u64,
    pub count: i64,
    pub datatype: TypeRef,
    /// Destination or source rank in `comm` (may be MPI_ANY_SOURCE / MPI_PROC_NULL).
    pub peer: i32,
    pub tag: i32,
    pub comm: VComm,
}

/// Send modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SendMode {
    Standard,
    Buffered,
    Synchronous,
    Ready,
}

/// What a request stands for, enough to re-post it or to report it as not restorable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestRecipe {
    Send {
        mode: SendMode,
        args: P2pArgs,
    },
    Recv {
        args: P2pArgs,
    },
    /// Persistent requests (`MPI_Send_init` and kin): inactive between `MPI_Start`s.
    PersistentSend {
        mode: SendMode,
        args: P2pArgs,
        active: bool,
    },
    PersistentRecv {
        args: P2pArgs,
        active: bool,
    },
    /// Nonblocking or persistent collective, or anything else the library completes itself.
    /// A persistent collective keeps the arguments of its `MPI_*_init` (`init`), to be made
    /// again on a renewed library.
    Collective {
        function: String,
        comm: VComm,
        persistent: bool,
        active: bool,
        init: Option<Box<CollInit>>,
    },
    /// Partitioned point-to-point (`MPI_Psend_init` / `MPI_Precv_init`): persistent, made again
    /// from `init`; `ready` marks the partitions a started send made ready (`MPI_Pready*`).
    Partitioned {
        init: Box<PartInit>,
        active: bool,
        ready: Vec<u64>,
    },
    /// Generalized request: completed by the program through `MPI_Grequest_complete`.
    Generalized {
        query_fn: u64,
        free_fn: u64,
        cancel_fn: u64,
        extra_state: u64,
    },
    /// A request whose operation the shim already finished (e.g. a receive satisfied from the
    /// drained-message buffer); holds the status to report.
    Completed {
        status: [i32; 5],
    },
    /// Nonblocking MPI-IO (`MPI_File_i*`): completed by a checkpoint's drain, one after the other
    /// in the order this process started them (`seq`), as ROMIO's collective ones need.
    FileIo {
        function: String,
        seq: u64,
    },
    /// Anything else: requests of RMA operations, buffer flushes, `MPI_Isendrecv`, matched
    /// receives; not restorable while pending.
    Other {
        function: String,
    },
}

impl RequestRecipe {
    pub fn is_persistent(&self) -> bool {
        matches!(
            self,
            RequestRecipe::PersistentSend { .. }
                | RequestRecipe::PersistentRecv { .. }
                | RequestRecipe::Collective { persistent: true, .. }
                | RequestRecipe::Partitioned { .. }
        )
    }
}

/// One argument of a persistent collective's `MPI_*_init`, in the C signature's order (the
/// request excepted): buffers as addresses, per-peer arrays copied, handles as the program's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollArg {
    /// A buffer (its address; `MPI_IN_PLACE` and `MPI_BOTTOM` included).
    Buf(u64),
    /// An `int` (count, root).
    Int(i32),
    /// An `MPI_Count` or `MPI_Aint`.
    Count(i64),
    /// An `int` array (counts, displacements), copied; `None` for a null pointer.
    Ints(Option<Vec<i32>>),
    /// An `MPI_Count` or `MPI_Aint` array, copied.
    Counts(Option<Vec<i64>>),
    Type(TypeRef),
    /// Per-peer datatypes (`*w` variants), copied.
    Types(Option<Vec<TypeRef>>),
    Op(VOp),
    Comm(VComm),
    Info(VInfo),
}

/// How a persistent collective was made: the function, its arguments, and its number among
/// the collectives of its communicator (`seq`), which orders the remaking the same on every
/// member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollInit {
    pub function: String,
    pub comm_gid: CommGid,
    pub seq: u64,
    pub args: Vec<CollArg>,
}

/// How a partitioned request was made. `order` is this process's count of partitioned inits
/// before it (they are made again in that order, so sends and receives match as before);
/// `pair` identifies the send/receive pair job-wide (both sides compute it alike).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartInit {
    pub send: bool,
    pub buf: u64,
    pub partitions: i32,
    pub count: i64,
    pub datatype: TypeRef,
    pub peer: i32,
    pub tag: i32,
    pub comm: VComm,
    pub info: VInfo,
    pub order: u64,
    pub pair: u64,
}

/// A user error handler kept by the shim (real objects always use MPI_ERRORS_RETURN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrhandlerRecipe {
    Comm { function: u64 },
    Win { function: u64 },
    File { function: u64 },
    Session { function: u64 },
}

/// An attribute key, with the program's copy and delete callbacks (0 = none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyvalRecipe {
    pub object: KeyvalObject,
    pub copy_fn: u64,
    pub delete_fn: u64,
    pub extra_state: u64,
    /// Deprecated MPI-1 `MPI_Keyval_create` (Fortran-style callbacks use the same C ABI here).
    pub legacy: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KeyvalObject {
    Comm,
    Datatype,
    Win,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MPI_INT: VDatatype = VDatatype::INT;
    const MPI_DOUBLE: VDatatype = VDatatype::DOUBLE;

    #[test]
    fn child_ids_agree_and_separate_colours() {
        let even = child_gid(WORLD_GID, 4, &[0, 2], None);
        assert_eq!(even, child_gid(WORLD_GID, 4, &[0, 2], None));
        assert_ne!(even, child_gid(WORLD_GID, 4, &[1, 3], None));
        assert_ne!(even, child_gid(WORLD_GID, 5, &[0, 2], None), "a second split differs");
        assert_ne!(even, child_gid(WORLD_GID, 4, &[0, 2], Some(&[1])), "intercomms differ");
        assert!(even > 2, "never collides with world or the reserved ids");
    }

    #[test]
    fn self_ids_differ_per_rank() {
        assert_ne!(self_gid(0), self_gid(1));
        assert_ne!(self_gid(0), WORLD_GID);
    }

    #[test]
    fn nested_type_recipes_know_their_inputs() {
        let vec = TypeRecipe::Vector { count: 3, blocklen: 1, stride: 4, old: TypeRef::Predefined(MPI_DOUBLE) };
        let st = TypeRecipe::Struct {
            blocklens: vec![1, 2],
            displs: vec![0, 8],
            types: vec![TypeRef::Predefined(MPI_INT), TypeRef::Derived(Box::new(vec.clone()))],
        };
        assert_eq!(st.inputs().len(), 2);
        assert_eq!(vec.depth(), 1);
        assert_eq!(st.depth(), 2);
    }

    #[test]
    fn recipes_survive_serialisation() {
        let comm = CommRecipe {
            gid: child_gid(WORLD_GID, 1, &[1, 0], None),
            world_ranks: vec![1, 0],
            remote_world_ranks: None,
            topology: Topology::Cart { dims: vec![2, 1], periods: vec![1, 0] },
            made_by: "MPI_Cart_create".into(),
            parent: Some(WORLD_GID),
        };
        let bytes = postcard::to_stdvec(&comm).unwrap();
        assert_eq!(postcard::from_bytes::<CommRecipe>(&bytes).unwrap(), comm);

        let req = RequestRecipe::PersistentRecv {
            args: P2pArgs {
                buf: 0x1000,
                count: 4,
                datatype: TypeRef::Derived(Box::new(TypeRecipe::Contiguous { count: 2, old: TypeRef::Predefined(MPI_INT) })),
                peer: -2,
                tag: -1,
                comm: VComm::WORLD,
            },
            active: true,
        };
        let bytes = postcard::to_stdvec(&req).unwrap();
        let back: RequestRecipe = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, req);
        assert!(back.is_persistent());
    }
}
