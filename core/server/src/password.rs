//! Password hashing: argon2id PHC strings, made and checked as Iggy's server
//! makes and checks them (the `argon2` crate's defaults: m = 19 MiB, t = 2,
//! p = 1), so a hash either server wrote verifies on the other.
//!
//! Invariants:
//! - A check answers true only if the PHC string parses, names an argon2
//!   variant, version and parameters the crate accepts, carries a salt and
//!   a hash, and the password's hash under them equals it, compared in
//!   constant time (`password_hash::Output`'s equality). Anything malformed
//!   verifies nothing.
//! - A check's working memory (`m` KiB) is taken from a small free list and
//!   given back after, instead of being allocated for each login: a fresh
//!   19 MiB allocation is mapped and zeroed by the kernel page by page and
//!   zeroed again by the allocator, which cost more CPU than the hash itself
//!   (docs/performance.md, "Issue 30"). Argon2 writes every block before it
//!   reads it, so what an earlier check left there never enters a result.
//! - The list is bounded (`KEPT_AT_MOST` buffers of at most
//!   `LARGEST_KEPT_BLOCKS` blocks), so what it keeps resident is bounded
//!   whatever hashes the users file holds.

use std::sync::Mutex;

use argon2::password_hash::{Output, PasswordHash, PasswordHasher, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use rand_core::OsRng;

use crate::auth::AuthError;

/// Working memories kept between checks (logins are checked at most one
/// per core at a time; two cover a small server's parallel logins).
const KEPT_AT_MOST: usize = 2;
/// A memory larger than this many KiB blocks is freed after its check.
const LARGEST_KEPT_BLOCKS: usize = 64 * 1024;

static FREE: Mutex<Vec<Vec<Block>>> = Mutex::new(Vec::new());

/// A new argon2id PHC hash of `password` under a fresh random salt.
pub(crate) fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// Checks a password against a PHC hash; any malformed hash verifies nothing.
pub fn verify_password(password: &str, phc: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(phc) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let Ok(algorithm) = Algorithm::try_from(parsed.algorithm) else {
        return false;
    };
    let version = match parsed.version.map(Version::try_from).transpose() {
        Ok(v) => v.unwrap_or_default(),
        Err(_) => return false,
    };
    let Ok(params) = Params::try_from(&parsed) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt_bytes) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let mut memory = take(params.block_count());
    let mut out = [0u8; Output::MAX_LENGTH];
    let Some(out) = out.get_mut(..expected.len()) else {
        return false;
    };
    let hashed = Argon2::new(algorithm, version, params).hash_password_into_with_memory(
        password.as_bytes(),
        salt_bytes,
        out,
        &mut memory[..],
    );
    give_back(memory);
    hashed.is_ok() && Output::new(out).is_ok_and(|computed| computed == expected)
}

fn take(blocks: usize) -> Vec<Block> {
    let mut memory = match FREE.lock() {
        Ok(mut free) => free.pop().unwrap_or_default(),
        // The list is a cache: a panic while it was held leaves a buffer
        // or none, either of which is fine to ignore.
        Err(_) => Vec::new(),
    };
    if memory.len() < blocks {
        memory.resize(blocks, Block::new());
    }
    memory
}

fn give_back(memory: Vec<Block>) {
    if memory.len() > LARGEST_KEPT_BLOCKS {
        return;
    }
    if let Ok(mut free) = FREE.lock()
        && free.len() < KEPT_AT_MOST
    {
        free.push(memory);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use argon2::password_hash::PasswordVerifier;

    use super::*;

    #[test]
    fn a_hash_verifies_its_password_and_no_other_as_the_crate_itself_decides() {
        let hash = hash_password("s3cret-pw").unwrap();
        let parsed = PasswordHash::new(&hash).unwrap();
        for (candidate, right) in [("s3cret-pw", true), ("s3cret-pW", false), ("", false)] {
            assert_eq!(verify_password(candidate, &hash), right, "{candidate:?}");
            let reference = Argon2::default()
                .verify_password(candidate.as_bytes(), &parsed)
                .is_ok();
            assert_eq!(reference, right, "{candidate:?}");
        }
    }

    #[test]
    fn hashes_under_other_variants_and_costs_verify_with_the_memory_they_name() {
        // given hashes of argon2i and argon2d, and a smaller and a larger m
        // than the default, each made by the crate itself
        for (algorithm, m) in [
            (Algorithm::Argon2i, 8 * 1024),
            (Algorithm::Argon2d, 4 * 1024),
            (Algorithm::Argon2id, 32 * 1024),
            (Algorithm::Argon2id, 19 * 1024),
        ] {
            let params = Params::new(m, 1, 1, None).unwrap();
            let salt = SaltString::generate(&mut OsRng);
            let hash = Argon2::new(algorithm, Version::V0x13, params)
                .hash_password(b"pw-123", &salt)
                .unwrap()
                .to_string();
            // then each verifies (with memory taken from, and given back to,
            // the free list in between) and a wrong password does not
            assert!(verify_password("pw-123", &hash), "{hash}");
            assert!(!verify_password("pw-124", &hash), "{hash}");
        }
    }

    #[test]
    fn a_malformed_hash_verifies_nothing() {
        let good = hash_password("pw").unwrap();
        let no_hash = good.rsplit_once('$').unwrap().0.to_string();
        for phc in [
            "",
            "not a hash",
            "$argon2id$v=19$m=19456,t=2,p=1",
            &no_hash,
            "$scrypt$ln=16,r=8,p=1$aM15713r3Xsvxbi31lqr1Q$nFNh2CVHVjNldFVKDHDlm4CbdRSCdEBsjjJxD+iCs5E",
            "$argon2id$v=99$m=19456,t=2,p=1$c29tZXNhbHQ$iWh06vD8Fy27wf9npn6FXWiCX4K6pW6Ue1Bnzz07Z8A",
        ] {
            assert!(!verify_password("pw", phc), "{phc:?}");
        }
    }

    #[test]
    fn the_free_list_stays_bounded() {
        for _ in 0..KEPT_AT_MOST + 2 {
            give_back(vec![Block::new(); 4]);
        }
        give_back(vec![Block::new(); LARGEST_KEPT_BLOCKS + 1]);
        let free = FREE.lock().unwrap();
        assert!(free.len() <= KEPT_AT_MOST);
        assert!(free.iter().all(|m| m.len() <= LARGEST_KEPT_BLOCKS));
    }
}
