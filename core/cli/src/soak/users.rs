//! The users step's oracle (issue 29): what the soak knows of each user it
//! created, and the pure check of what a recovered server shows of one.
//! The requests are `userstep`'s.
//!
//! Invariants:
//! - Each user name belongs to one client (`UserKey`: `SLOTS` names per
//!   client), so its changes are sequential and, while the server lives,
//!   the client's model of it is exact: every change is acknowledged,
//!   refused (nothing changed) or in doubt, and a client stops at its first
//!   change in doubt. A user therefore has at most one change in doubt, its
//!   last (`UserRec::allowed`).
//! - A change is recorded before it is sent, with the state it leads to
//!   (`UserOp::after`) and the two ticks of the global clock, and completed
//!   after its answer. A created token's secret is known only from the
//!   answer: one whose answer was lost is kept as "unknown" (it may exist;
//!   we cannot log in with it).
//! - After a restart, what the server shows of a user (whether it exists,
//!   its status and permissions, which password logs in, which tokens it
//!   lists, which secrets we know log in as it) must be the state after its
//!   last acknowledged change or after its change in doubt, whole (`judge`):
//!   never a mix of the two, never a permission set nobody asked for, never
//!   a user whose deletion was acknowledged. The state found becomes the
//!   confirmed one, and the changes are forgotten.
//! - A secret we knew whose token is gone (deleted, or its user deleted)
//!   must never log in again: the most recent `DEAD_TOKENS` are tried at
//!   every verification.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use sluice_server::iggy::permissions::Permissions;

use super::oracle::{NEVER, Tick};

/// User names per client.
pub(super) const SLOTS: u32 = 2;
/// Token names a user may hold (Iggy's names are 3 to 30 bytes).
pub(super) const TOKEN_NAMES: [&str; 3] = ["tk0", "tk1", "tk2"];
/// How many secrets of deleted tokens every verification tries.
pub(super) const DEAD_TOKENS: usize = 64;

/// One user name, owned by one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct UserKey {
    pub(super) client: u32,
    pub(super) slot: u32,
}

impl UserKey {
    /// Its name: not a number (so a path names it, not an id), not root's.
    pub(super) fn name(&self) -> String {
        format!("soak-u{}-{}", self.client, self.slot)
    }

    /// Every user name the clients own.
    pub(super) fn all(clients: u32) -> Vec<UserKey> {
        (1..=clients)
            .flat_map(|client| (0..SLOTS).map(move |slot| UserKey { client, slot }))
            .collect()
    }
}

/// A user as the soak asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Account {
    pub(super) active: bool,
    pub(super) permissions: Option<Permissions>,
    pub(super) password: String,
    /// Token name, and its secret (`None`: the answer that carried it was
    /// lost).
    pub(super) tokens: BTreeMap<String, Option<String>>,
}

impl Account {
    fn holds_secret(&self, secret: &str) -> bool {
        self.tokens.values().any(|s| s.as_deref() == Some(secret))
    }

    fn secrets(&self) -> impl Iterator<Item = &String> {
        self.tokens.values().flatten()
    }
}

/// One change of a user, with its ticks.
#[derive(Debug, Clone)]
pub(super) struct UserOp {
    pub(super) start: Tick,
    pub(super) end: Tick,
    pub(super) acked: bool,
    pub(super) what: &'static str,
    /// The user after it (`None`: deleted).
    pub(super) after: Option<Account>,
}

impl UserOp {
    pub(super) fn sent(start: Tick, what: &'static str, after: Option<Account>) -> UserOp {
        UserOp {
            start,
            end: NEVER,
            acked: false,
            what,
            after,
        }
    }
}

/// One user name's record.
#[derive(Debug, Clone, Default)]
pub(super) struct UserRec {
    /// What the last verification found (`None`: no such user).
    pub(super) confirmed: Option<Account>,
    /// Its changes since then, in the order sent; those refused or never
    /// sent are removed.
    pub(super) ops: Vec<UserOp>,
}

impl UserRec {
    /// The state after the last acknowledged change.
    pub(super) fn current(&self) -> Option<&Account> {
        self.ops
            .iter()
            .rev()
            .find(|op| op.acked)
            .map_or(self.confirmed.as_ref(), |op| op.after.as_ref())
    }

    /// The change in doubt, if any: unanswered, sent before `kill_tick`,
    /// and after every acknowledged one.
    fn in_doubt(&self, kill_tick: Tick) -> Option<&UserOp> {
        self.ops
            .last()
            .filter(|op| !op.acked && op.start < kill_tick)
    }

    /// What a verification may find: the state after the last acknowledged
    /// change, then the state after the change in doubt.
    pub(super) fn allowed(&self, kill_tick: Tick) -> Vec<Option<Account>> {
        let mut out = vec![self.current().cloned()];
        if let Some(op) = self.in_doubt(kill_tick) {
            out.push(op.after.clone());
        }
        out
    }

    /// Whether a change since the last verification may have left `field`
    /// of the user other than it was confirmed (a creation always may).
    fn may_differ<T: PartialEq>(&self, field: impl Fn(&Account) -> T) -> bool {
        self.ops
            .iter()
            .any(|op| match (&self.confirmed, &op.after) {
                (Some(was), Some(now)) => field(was) != field(now),
                (None, Some(_)) => true,
                (_, None) => false,
            })
    }

    /// Whether the verification must log in with a password (an expensive
    /// hash): the user was created or given a password since the last one.
    pub(super) fn password_may_differ(&self) -> bool {
        self.may_differ(|a| a.password.clone())
    }

    /// Whether the verification must read the token names: a token was
    /// created or deleted since the last one.
    pub(super) fn tokens_may_differ(&self) -> bool {
        self.may_differ(|a| a.tokens.keys().cloned().collect::<Vec<_>>())
    }

    /// Every secret this record knows (confirmed, or in any change since).
    pub(super) fn known_secrets(&self) -> BTreeSet<String> {
        self.confirmed
            .iter()
            .chain(self.ops.iter().filter_map(|op| op.after.as_ref()))
            .flat_map(|a| a.secrets().cloned())
            .collect()
    }

    /// The changes since the last verification, for a violation's text.
    pub(super) fn history(&self) -> String {
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|op| {
                let how = if op.acked { "acknowledged" } else { "in doubt" };
                format!(
                    "{} ({how}, ticks {}..{})",
                    op.what,
                    op.start,
                    show_tick(op.end)
                )
            })
            .collect();
        if ops.is_empty() {
            "none".into()
        } else {
            ops.join(", ")
        }
    }
}

fn show_tick(t: Tick) -> String {
    if t == NEVER {
        "unanswered".into()
    } else {
        t.to_string()
    }
}

/// What a verification read of one existing user.
#[derive(Debug, Clone, Default)]
pub(super) struct SeenUser {
    pub(super) active: bool,
    pub(super) permissions: Option<Permissions>,
    /// Whether its possible passwords were tried, and which logged in.
    pub(super) passwords_tried: bool,
    pub(super) password: Option<String>,
    /// The token names it lists (`None`: not read, it cannot log in).
    pub(super) tokens: Option<BTreeSet<String>>,
    /// Each secret we know of it, and whether it logged in as this user.
    pub(super) secrets: BTreeMap<String, bool>,
}

/// Why `seen` is not `want`, if it is not.
fn mismatch(want: Option<&Account>, seen: Option<&SeenUser>) -> Option<String> {
    let (a, s) = match (want, seen) {
        (None, None) => return None,
        (None, Some(_)) => return Some("it exists".into()),
        (Some(_), None) => return Some("it is gone".into()),
        (Some(a), Some(s)) => (a, s),
    };
    let mut why = Vec::new();
    if a.active != s.active {
        why.push(format!("active {}, expected {}", s.active, a.active));
    }
    if a.permissions != s.permissions {
        why.push(format!(
            "permissions {:?}, expected {:?}",
            s.permissions, a.permissions
        ));
    }
    if s.passwords_tried && s.password.as_deref() != Some(a.password.as_str()) {
        why.push(match &s.password {
            Some(_) => "it logs in with another password it may have".into(),
            None => "no password it may have logs in".into(),
        });
    }
    if let Some(names) = &s.tokens {
        let want: BTreeSet<String> = a.tokens.keys().cloned().collect();
        if *names != want {
            why.push(format!("tokens {names:?}, expected {want:?}"));
        }
    }
    for (secret, logged_in) in &s.secrets {
        let holds = a.holds_secret(secret);
        let expected = a.active && holds;
        if *logged_in != expected {
            let name = a
                .tokens
                .iter()
                .find(|(_, s)| s.as_deref() == Some(secret))
                .map_or("a deleted token", |(n, _)| n.as_str());
            why.push(if *logged_in {
                format!("{name} logs in, expected refused")
            } else {
                format!("{name} is refused, expected to log in")
            });
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Which of `allowed` (`UserRec::allowed`) the server shows: its index, or
/// why it shows none of them.
pub(super) fn judge(allowed: &[Option<Account>], seen: Option<&SeenUser>) -> Result<usize, String> {
    let mut why = Vec::new();
    for (i, want) in allowed.iter().enumerate() {
        match mismatch(want.as_ref(), seen) {
            None => return Ok(i),
            Some(w) => why.push(format!(
                "not the state after {} ({w})",
                if i == 0 {
                    "the last acknowledged change"
                } else {
                    "the change in doubt"
                }
            )),
        }
    }
    Err(why.join("; "))
}

/// What the soak takes as confirmed when the server showed none of the
/// allowed states: what it showed, so that one violation is not reported
/// again at every later verification.
pub(super) fn adopt(allowed: &[Option<Account>], seen: Option<&SeenUser>) -> Option<Account> {
    let s = seen?;
    let base = allowed.iter().flatten().next();
    let known: BTreeMap<&String, &Option<String>> =
        allowed.iter().flatten().flat_map(|a| &a.tokens).collect();
    let tokens = match &s.tokens {
        Some(names) => names
            .iter()
            .map(|n| (n.clone(), known.get(n).copied().cloned().flatten()))
            .collect(),
        None => base.map(|a| a.tokens.clone()).unwrap_or_default(),
    };
    Some(Account {
        active: s.active,
        permissions: s.permissions.clone(),
        password: s
            .password
            .clone()
            .or_else(|| base.map(|a| a.password.clone()))
            .unwrap_or_default(),
        tokens,
    })
}

/// The secrets of deleted tokens, most recent last, at most `DEAD_TOKENS`.
#[derive(Debug, Default)]
pub(super) struct DeadTokens(VecDeque<String>);

impl DeadTokens {
    pub(super) fn bury(&mut self, secret: String) {
        if !self.0.contains(&secret) {
            self.0.push_back(secret);
        }
        while self.0.len() > DEAD_TOKENS {
            self.0.pop_front();
        }
    }

    pub(super) fn all(&self) -> Vec<String> {
        self.0.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_server::iggy::permissions::GlobalPermissions;

    fn reader() -> Option<Permissions> {
        Some(Permissions {
            global: GlobalPermissions {
                read_streams: true,
                ..GlobalPermissions::default()
            },
            streams: None,
        })
    }

    fn account(password: &str, tokens: &[(&str, Option<&str>)]) -> Account {
        Account {
            active: true,
            permissions: reader(),
            password: password.into(),
            tokens: tokens
                .iter()
                .map(|(n, s)| (n.to_string(), s.map(str::to_string)))
                .collect(),
        }
    }

    /// What a server that holds `a` exactly shows of it.
    fn seen(a: &Account, secrets: &[&str]) -> SeenUser {
        SeenUser {
            active: a.active,
            permissions: a.permissions.clone(),
            passwords_tried: a.active,
            password: a.active.then(|| a.password.clone()),
            tokens: a.active.then(|| a.tokens.keys().cloned().collect()),
            secrets: secrets
                .iter()
                .map(|s| (s.to_string(), a.active && a.holds_secret(s)))
                .collect(),
        }
    }

    fn op(start: Tick, end: Tick, acked: bool, after: Option<Account>) -> UserOp {
        UserOp {
            start,
            end,
            acked,
            what: "t",
            after,
        }
    }

    #[test]
    fn given_an_acknowledged_change_then_only_its_state_is_allowed() {
        // Given a user created and then given no permissions, both
        // acknowledged,
        let created = account("p1", &[]);
        let stripped = Account {
            permissions: None,
            ..created.clone()
        };
        let rec = UserRec {
            confirmed: None,
            ops: vec![
                op(1, 2, true, Some(created.clone())),
                op(3, 4, true, Some(stripped.clone())),
            ],
        };
        // when a server shows the user with no permissions, that is right;
        let allowed = rec.allowed(10);
        assert_eq!(allowed, vec![Some(stripped.clone())]);
        assert_eq!(judge(&allowed, Some(&seen(&stripped, &[]))), Ok(0));
        // then one that kept the permissions it no longer has, or lost the
        // user, is a violation.
        let err = judge(&allowed, Some(&seen(&created, &[]))).unwrap_err();
        assert!(err.contains("permissions"), "{err}");
        assert!(judge(&allowed, None).is_err());
    }

    #[test]
    fn given_a_change_in_doubt_then_the_state_before_or_after_it_is_allowed_never_a_mix() {
        // Given a user whose permissions and password changes are
        // acknowledged, and a deletion of one token in doubt at the kill,
        let before = account("p2", &[("tk0", Some("s0")), ("tk1", Some("s1"))]);
        let after = account("p2", &[("tk1", Some("s1"))]);
        let rec = UserRec {
            confirmed: Some(before.clone()),
            ops: vec![op(5, NEVER, false, Some(after.clone()))],
        };
        let allowed = rec.allowed(9);
        // then either whole state is found,
        assert_eq!(judge(&allowed, Some(&seen(&before, &["s0", "s1"]))), Ok(0));
        assert_eq!(judge(&allowed, Some(&seen(&after, &["s0", "s1"]))), Ok(1));
        // but not the token listed while its secret is refused (a mix),
        let mut mix = seen(&before, &["s0", "s1"]);
        mix.secrets.insert("s0".into(), false);
        assert!(judge(&allowed, Some(&mix)).is_err());
        // nor a change sent after the kill (it was never in doubt).
        let late = UserRec {
            confirmed: Some(before.clone()),
            ops: vec![op(11, NEVER, false, Some(after.clone()))],
        };
        assert_eq!(late.allowed(9), vec![Some(before)]);
    }

    #[test]
    fn given_an_acknowledged_deletion_then_the_user_and_its_tokens_never_come_back() {
        let held = account("p3", &[("tk0", Some("s0"))]);
        let rec = UserRec {
            confirmed: Some(held.clone()),
            ops: vec![op(1, 2, true, None)],
        };
        let allowed = rec.allowed(5);
        assert_eq!(judge(&allowed, None), Ok(0));
        assert!(
            judge(&allowed, Some(&seen(&held, &["s0"])))
                .unwrap_err()
                .contains("it exists")
        );
        // Its secret is known, so the verification buries it.
        assert!(rec.known_secrets().contains("s0"));
    }

    #[test]
    fn given_an_inactive_user_then_its_tokens_are_refused_and_its_password_not_tried() {
        let mut off = account("p4", &[("tk0", Some("s0"))]);
        off.active = false;
        let allowed = vec![Some(off.clone())];
        assert_eq!(judge(&allowed, Some(&seen(&off, &["s0"]))), Ok(0));
        // A token of an inactive user that logs in is a violation.
        let mut wrong = seen(&off, &["s0"]);
        wrong.secrets.insert("s0".into(), true);
        assert!(judge(&allowed, Some(&wrong)).is_err());
    }

    #[test]
    fn given_a_mismatch_then_what_the_server_shows_is_adopted_with_the_secrets_known() {
        let a = account("p5", &[("tk0", Some("s0")), ("tk1", None)]);
        let mut s = seen(&a, &["s0"]);
        s.permissions = None;
        s.tokens = Some(["tk0".to_string()].into_iter().collect());
        let adopted = adopt(&[Some(a)], Some(&s));
        assert_eq!(
            adopted,
            Some(Account {
                permissions: None,
                ..account("p5", &[("tk0", Some("s0"))])
            })
        );
    }

    #[test]
    fn dead_tokens_keep_the_most_recent_ones() {
        let mut dead = DeadTokens::default();
        for i in 0..(DEAD_TOKENS + 3) {
            dead.bury(format!("s{i}"));
        }
        // A secret buried twice is kept once.
        dead.bury("s10".into());
        let all = dead.all();
        assert_eq!(all.len(), DEAD_TOKENS);
        assert_eq!(all.first().map(String::as_str), Some("s3"));
    }
}
