//! FNV-1a, 64-bit: the hash behind every id wirelint shows or keys a table
//! by across runs — shape ids, finding fingerprints, the suffix of a
//! shortened key, field-path and value hashes.
//!
//! Ids that users see must not change between runs, hosts or versions, so
//! this is not a randomly seeded hasher (those key the in-memory tables,
//! see `budget::Lru`). FNV-1a is tiny, fast on the short strings hashed
//! here, and can be continued piece by piece, so a hash of joined pieces
//! needs no joined string. It lives apart from its users (the memory
//! budget, shapes, findings, namespace state, the rules) so that none of
//! them imports another only for a hash.

/// FNV-1a's starting value.
pub const FNV1A_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_continue(FNV1A_START, bytes)
}

/// FNV-1a over more bytes: `fnv1a_continue(fnv1a(a), b) == fnv1a(a ++ b)`,
/// so a hash can be built piece by piece without joining the pieces.
pub fn fnv1a_continue(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned: ids built on this hash must not change between versions or
    /// hosts.
    #[test]
    fn fnv1a_is_the_standard_64_bit_hash() {
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(
            fnv1a_continue(fnv1a(b"find "), b"blog.posts"),
            fnv1a(b"find blog.posts")
        );
    }
}
