//! The users step's requests (issue 29): the clients' changes to the users
//! they own, and the verification that reads every user back after a
//! restart. The model and the check are `users`'.
//!
//! Invariants:
//! - A change is recorded in the oracle before it is sent (`UserOp::sent`)
//!   and completed after its answer, like every other operation; refused
//!   ones (a full disk) and ones never sent are removed, one without an
//!   answer stays in doubt and stops its client for the cycle.
//! - Users are changed by root, as an operator would; a token is created and
//!   deleted by its user itself (a login as the user, with one of its tokens
//!   when we know a secret, else with its password; then its
//!   `/personal-access-tokens`), which is Iggy's only way. A login changes
//!   nothing, so one that fails only stops the client.
//! - Which change a client makes is drawn from its own seeded stream and its
//!   exact model of the user (`draw`): a token change only for an active
//!   user, a token deletion only of a token it holds.
//! - The verification runs with no client: it lists the users, reads each
//!   one's status and permissions as root, tries every secret the oracle
//!   knows (those of deleted tokens must be refused), logs in as each
//!   active user with the passwords it may have and lists its tokens, and
//!   judges the whole against the oracle. A password login costs the
//!   server an argon2 hash, so it is made only where a change since the
//!   last verification may have made the password (or, without a secret
//!   that gives a session, the token names) other than confirmed, and at
//!   the final verification for every user.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use sluice_server::iggy::permissions::{
    GlobalPermissions, Permissions, StreamPermissions, TopicPermissions,
};
use sluice_storage::sim::SimRng;

use super::client::{Ctx, Reply, call};
use super::oracle::Counts;
use super::topics;
use super::users::{Account, SLOTS, SeenUser, TOKEN_NAMES, UserKey, UserOp, adopt, judge};
use super::workload::{Outcome, Step, classify, count};

/// One change of a user.
#[derive(Debug, Clone)]
enum Change {
    Create(Account),
    Permissions(Option<Permissions>),
    Status(bool),
    Password(String),
    Delete,
    CreateToken(String),
    DeleteToken(String),
}

impl Change {
    fn what(&self) -> &'static str {
        match self {
            Change::Create(_) => "create",
            Change::Permissions(_) => "set permissions",
            Change::Status(true) => "activate",
            Change::Status(false) => "deactivate",
            Change::Password(_) => "change password",
            Change::Delete => "delete",
            Change::CreateToken(_) => "create token",
            Change::DeleteToken(_) => "delete token",
        }
    }

    /// The user after this change of `current` (a created token's secret is
    /// not known yet).
    fn apply(&self, current: Option<&Account>) -> Option<Account> {
        let mut next = current.cloned();
        match (self, next.as_mut()) {
            (Change::Create(a), _) => return Some(a.clone()),
            (Change::Delete, _) => return None,
            (Change::Permissions(p), Some(a)) => a.permissions = p.clone(),
            (Change::Status(on), Some(a)) => a.active = *on,
            (Change::Password(p), Some(a)) => a.password = p.clone(),
            (Change::CreateToken(name), Some(a)) => {
                a.tokens.insert(name.clone(), None);
            }
            (Change::DeleteToken(name), Some(a)) => {
                a.tokens.remove(name);
            }
            (_, None) => {}
        }
        next
    }

    fn bump(&self, c: &mut Counts) {
        match self {
            Change::Create(_) => c.user_creates += 1,
            Change::Permissions(_) => c.user_permissions += 1,
            Change::Status(_) => c.user_statuses += 1,
            Change::Password(_) => c.user_passwords += 1,
            Change::Delete => c.user_deletes += 1,
            Change::CreateToken(_) => c.tokens_created += 1,
            Change::DeleteToken(_) => c.tokens_deleted += 1,
        }
    }
}

/// True with probability `1 / n`.
fn one_in(rng: &mut SimRng, n: u64) -> bool {
    rng.below(n) == 0
}

/// A seeded permission set: none at all, or global flags (the managing ones
/// rarer) and, half of the time, grants on the soak's stream and perhaps one
/// of its topics.
fn draw_permissions(rng: &mut SimRng, stream: u32) -> Option<Permissions> {
    if one_in(rng, 6) {
        return None;
    }
    let global = GlobalPermissions {
        manage_servers: one_in(rng, 8),
        read_servers: one_in(rng, 4),
        manage_users: one_in(rng, 8),
        read_users: one_in(rng, 4),
        manage_streams: one_in(rng, 8),
        read_streams: one_in(rng, 3),
        manage_topics: one_in(rng, 8),
        read_topics: one_in(rng, 3),
        poll_messages: one_in(rng, 3),
        send_messages: one_in(rng, 3),
    };
    let streams = rng.coin().then(|| {
        let topics = one_in(rng, 3).then(|| {
            let topic = u32::try_from(rng.below(u64::from(topics::count()))).unwrap_or(0);
            let grant = TopicPermissions {
                manage_topic: one_in(rng, 6),
                read_topic: rng.coin(),
                poll_messages: rng.coin(),
                send_messages: rng.coin(),
            };
            BTreeMap::from([(topic, grant)])
        });
        let grant = StreamPermissions {
            manage_stream: one_in(rng, 6),
            read_stream: rng.coin(),
            manage_topics: one_in(rng, 6),
            read_topics: rng.coin(),
            poll_messages: rng.coin(),
            send_messages: rng.coin(),
            topics,
        };
        BTreeMap::from([(stream, grant)])
    });
    Some(Permissions { global, streams })
}

fn draw_password(rng: &mut SimRng) -> String {
    format!("pw-{:016x}", rng.next_u64())
}

/// The next change of a user whose state is `current`.
fn draw(rng: &mut SimRng, current: Option<&Account>, stream: u32) -> Change {
    let Some(a) = current else {
        return Change::Create(Account {
            active: !one_in(rng, 5),
            permissions: draw_permissions(rng, stream),
            password: draw_password(rng),
            tokens: BTreeMap::new(),
        });
    };
    let free = TOKEN_NAMES
        .iter()
        .find(|n| !a.tokens.contains_key(**n))
        .map(|n| n.to_string());
    let held: Vec<&String> = a.tokens.keys().collect();
    // Token changes are the most frequent: each needs an active user
    // holding (or not) a token, which the others undo. A token change the
    // user cannot make activates it, or creates or deletes a token instead.
    let token = match rng.below(100) {
        0..20 => return Change::Permissions(draw_permissions(rng, stream)),
        20..30 => return Change::Status(!a.active),
        30..40 => return Change::Password(draw_password(rng)),
        40..46 => return Change::Delete,
        46..76 => true,
        _ => false,
    };
    let pick = rng.below(held.len().max(1) as u64);
    match (a.active, free, token) {
        (false, _, _) => Change::Status(true),
        (true, Some(name), true) => Change::CreateToken(name),
        (true, free, _) => match held.get(usize::try_from(pick).unwrap_or(0)) {
            Some(name) => Change::DeleteToken(name.to_string()),
            None => Change::CreateToken(free.unwrap_or_default()),
        },
    }
}

/// One users operation of `client`: a change of one of its users.
pub(super) async fn step(ctx: &Ctx, client: u32, rng: &mut SimRng) -> Step {
    let key = UserKey {
        client,
        slot: u32::try_from(rng.below(u64::from(SLOTS))).unwrap_or(0),
    };
    let (current, stream) = {
        let o = ctx.oracle();
        let current = o.users.get(&key).and_then(|r| r.current().cloned());
        (current, o.stream_id)
    };
    let change = draw(rng, current.as_ref(), stream);
    let name = key.name();
    let root = |req: reqwest::RequestBuilder| req.bearer_auth(&ctx.token);
    let (req, ok) = match (&change, &current) {
        (Change::Create(a), _) => (
            root(ctx.http.post(ctx.url("/users"))).json(&json!({
                "username": name,
                "password": a.password,
                "status": if a.active { "active" } else { "inactive" },
                "permissions": a.permissions,
            })),
            200,
        ),
        (Change::Permissions(p), _) => (
            root(ctx.http.put(ctx.url(&format!("/users/{name}/permissions"))))
                .json(&json!({ "permissions": p })),
            204,
        ),
        (Change::Status(on), _) => (
            root(ctx.http.put(ctx.url(&format!("/users/{name}"))))
                .json(&json!({ "status": if *on { "active" } else { "inactive" } })),
            204,
        ),
        (Change::Password(new), Some(a)) => (
            root(ctx.http.put(ctx.url(&format!("/users/{name}/password"))))
                .json(&json!({ "current_password": a.password, "new_password": new })),
            204,
        ),
        (Change::Delete, _) => (
            root(ctx.http.delete(ctx.url(&format!("/users/{name}")))),
            204,
        ),
        (Change::CreateToken(token), Some(a)) => {
            let session = match login_as(ctx, &name, a).await {
                Ok(s) => s,
                Err(step) => return step,
            };
            (
                ctx.http
                    .post(ctx.url("/personal-access-tokens"))
                    .bearer_auth(session)
                    .json(&json!({ "name": token, "expiry": 0 })),
                200,
            )
        }
        (Change::DeleteToken(token), Some(a)) => {
            let session = match login_as(ctx, &name, a).await {
                Ok(s) => s,
                Err(step) => return step,
            };
            (
                ctx.http
                    .delete(ctx.url(&format!("/personal-access-tokens/{token}")))
                    .bearer_auth(session),
                204,
            )
        }
        // `draw` makes these only of an existing user.
        (Change::Password(_) | Change::CreateToken(_) | Change::DeleteToken(_), None) => {
            return Step::Continue;
        }
    };
    let after = change.apply(current.as_ref());
    let start = ctx.tick();
    let index = {
        let mut o = ctx.oracle();
        let ops = &mut o.users.entry(key).or_default().ops;
        ops.push(UserOp::sent(start, change.what(), after));
        ops.len() - 1
    };
    let reply = call(req).await;
    let what = format!("{} user {name}", change.what());
    let outcome = classify(ctx, start, &reply, ok, None, &what, None);
    let secret = match (&change, &outcome, &reply) {
        (Change::CreateToken(_), Outcome::Acked(_), Reply::Answer { body, .. }) => {
            let secret = serde_json::from_str::<Value>(body)
                .ok()
                .and_then(|v| v["token"].as_str().map(str::to_string));
            if secret.is_none() {
                ctx.violation(format!("{what}: no token in the answer {body}"));
            }
            secret
        }
        _ => None,
    };
    {
        let mut o = ctx.oracle();
        let ops = &mut o.users.entry(key).or_default().ops;
        match outcome {
            Outcome::Acked(end) => {
                if let Some(op) = ops.get_mut(index) {
                    op.acked = true;
                    op.end = end;
                    if let (Change::CreateToken(token), Some(a)) = (&change, op.after.as_mut()) {
                        a.tokens.insert(token.clone(), secret);
                    }
                }
            }
            Outcome::Refused | Outcome::Full | Outcome::Gone | Outcome::NotSent => {
                if index < ops.len() {
                    ops.remove(index);
                }
            }
            Outcome::InDoubt => {}
        }
    }
    count(ctx, &outcome, |c| change.bump(c))
}

/// Logs in as user `name`, whose state is `a`, for a token change: with a
/// token whose secret we know (it must log in: it is acknowledged and its
/// user active; and it costs the server no password hash), else with its
/// password. Returns the session token, or the step to take when there is
/// none (a login changes nothing).
async fn login_as(ctx: &Ctx, name: &str, a: &Account) -> Result<String, Step> {
    let (url, body, what) = match a
        .tokens
        .iter()
        .find_map(|(n, s)| s.as_ref().map(|s| (n, s)))
    {
        Some((token, secret)) => (
            "/personal-access-tokens/login",
            json!({ "token": secret }),
            format!("login as user {name} with its token {token}"),
        ),
        None => (
            "/users/login",
            json!({ "username": name, "password": a.password }),
            format!("login as user {name}"),
        ),
    };
    let start = ctx.tick();
    let reply = call(ctx.http.post(ctx.url(url)).json(&body)).await;
    match classify(ctx, start, &reply, 200, None, &what, None) {
        Outcome::Acked(_) => match session_of(&reply) {
            Some((_, token)) => Ok(token),
            None => {
                ctx.violation(format!("{what}: no token in {}", reply.describe()));
                Err(Step::Stop)
            }
        },
        Outcome::Refused | Outcome::Full | Outcome::Gone => Err(Step::Continue),
        Outcome::InDoubt | Outcome::NotSent => Err(Step::Stop),
    }
}

/// The user id and session token of a login answer (Iggy's `IdentityInfo`).
fn session_of(reply: &Reply) -> Option<(u64, String)> {
    let Reply::Answer { body, .. } = reply else {
        return None;
    };
    let v: Value = serde_json::from_str(body).ok()?;
    let token = v["access_token"]["token"].as_str()?.to_string();
    Some((v["user_id"].as_u64()?, token))
}

/// A login (of a password or a token) from a live server: the session's
/// user id and token, or `None` when the server refused the credentials
/// (`refused` says which answers are that refusal).
async fn try_login(
    ctx: &Ctx,
    url: &str,
    body: Value,
    refused: fn(u16, &str) -> bool,
    what: &str,
) -> Result<Option<(u64, String)>, String> {
    let reply = call(ctx.http.post(ctx.url(url)).json(&body)).await;
    match &reply {
        Reply::Answer { status: 200, .. } => session_of(&reply)
            .map(Some)
            .ok_or_else(|| format!("{what}: no session in {}", reply.describe())),
        Reply::Answer { status, body } if refused(*status, body) => Ok(None),
        other => Err(format!("{what}: {}", other.describe())),
    }
}

async fn token_login(ctx: &Ctx, secret: &str) -> Result<Option<(u64, String)>, String> {
    try_login(
        ctx,
        "/personal-access-tokens/login",
        json!({ "token": secret }),
        // An unknown, deleted or expired token (401), or the token of an
        // inactive user, which Iggy answers `user_inactive` (47, a 400).
        |status, body| status == 401 || (status == 400 && body.contains("\"id\":47")),
        "token login",
    )
    .await
}

async fn password_login(
    ctx: &Ctx,
    name: &str,
    password: &str,
) -> Result<Option<(u64, String)>, String> {
    try_login(
        ctx,
        "/users/login",
        json!({ "username": name, "password": password }),
        |status, _| status == 400,
        &format!("login as {name}"),
    )
    .await
}

async fn get_json(ctx: &Ctx, path: &str, token: &str) -> Result<Value, String> {
    let reply = call(ctx.http.get(ctx.url(path)).bearer_auth(token)).await;
    match &reply {
        Reply::Answer { status: 200, body } => {
            serde_json::from_str(body).map_err(|e| format!("GET {path}: not JSON: {e}"))
        }
        other => Err(format!("GET {path}: {}", other.describe())),
    }
}

/// `GET /users`: every user but root, by name: `(id, active)`.
async fn list_users(ctx: &Ctx) -> Result<BTreeMap<String, (u64, bool)>, String> {
    let v = get_json(ctx, "/users", &ctx.token).await?;
    let mut out = BTreeMap::new();
    for u in v.as_array().ok_or("GET /users: not a list")? {
        let (Some(id), Some(name), Some(status)) = (
            u["id"].as_u64(),
            u["username"].as_str(),
            u["status"].as_str(),
        ) else {
            return Err(format!(
                "GET /users: a user without id, name or status: {u}"
            ));
        };
        if id != 0
            && out
                .insert(name.to_string(), (id, status == "active"))
                .is_some()
        {
            return Err(format!("GET /users: {name} is listed twice"));
        }
    }
    Ok(out)
}

/// Which parts of a user a verification reads beyond its status,
/// permissions and the secrets we know (cheap): those a password login
/// needs (each one an argon2 hash on the server).
#[derive(Debug, Clone, Copy)]
struct Depth {
    /// Log in with the passwords it may have.
    passwords: bool,
    /// List its tokens, with a password login if no secret gave a session.
    tokens: bool,
}

/// What the server shows of user `name` (listed with `id`), with the
/// secrets `allowed` may hold tried, and its passwords and token names as
/// deep as `depth` says (a session a secret gave always lists the names).
async fn read_user(
    ctx: &Ctx,
    name: &str,
    id: u64,
    allowed: &[Option<Account>],
    depth: Depth,
) -> Result<SeenUser, String> {
    let v = get_json(ctx, &format!("/users/{name}"), &ctx.token).await?;
    if v["id"].as_u64() != Some(id) || v["username"].as_str() != Some(name) {
        ctx.violation(format!(
            "GET /users/{name} answers {v}, GET /users listed it with id {id}"
        ));
    }
    let active = match v["status"].as_str() {
        Some("active") => true,
        Some("inactive") => false,
        _ => return Err(format!("GET /users/{name}: no status in {v}")),
    };
    let permissions: Option<Permissions> = serde_json::from_value(v["permissions"].clone())
        .map_err(|e| format!("GET /users/{name}: permissions not Iggy's: {e}"))?;
    let mut seen = SeenUser {
        active,
        permissions,
        ..SeenUser::default()
    };
    let secrets: BTreeSet<&String> = allowed
        .iter()
        .flatten()
        .flat_map(|a| a.tokens.values().flatten())
        .collect();
    let mut session = None;
    for secret in secrets {
        let login = token_login(ctx, secret).await?;
        if let Some((holder, token)) = &login {
            if *holder != id {
                ctx.violation(format!(
                    "a token of user {name} (id {id}) logs in as user {holder}"
                ));
            }
            session.get_or_insert_with(|| token.clone());
        }
        seen.secrets.insert(secret.clone(), login.is_some());
    }
    ctx.oracle().counts.token_logins_tried += seen.secrets.len() as u64;
    if active {
        if depth.passwords || (depth.tokens && session.is_none()) {
            seen.passwords_tried = true;
            let mut tried = BTreeSet::new();
            for a in allowed.iter().flatten() {
                if !tried.insert(&a.password) {
                    continue;
                }
                if let Some((_, token)) = password_login(ctx, name, &a.password).await? {
                    seen.password = Some(a.password.clone());
                    session = Some(token);
                    break;
                }
            }
        }
        if let Some(token) = &session {
            let v = get_json(ctx, "/personal-access-tokens", token).await?;
            let names = v
                .as_array()
                .ok_or("GET /personal-access-tokens: not a list")?
                .iter()
                .map(|t| t["name"].as_str().map(str::to_string))
                .collect::<Option<BTreeSet<String>>>()
                .ok_or("GET /personal-access-tokens: a token without a name")?;
            seen.tokens = Some(names);
        }
    }
    Ok(seen)
}

/// The users part of a verification (no client running): every user the
/// clients own is judged against the oracle, and what it shows becomes
/// what the oracle knows. `last`: the final verification (every password
/// is tried).
pub(super) async fn verify_users(ctx: &Ctx, clients: u32, last: bool) -> Result<(), String> {
    let listed = list_users(ctx).await?;
    let keys = UserKey::all(clients);
    let names: BTreeSet<String> = keys.iter().map(UserKey::name).collect();
    for name in listed.keys() {
        if !names.contains(name) {
            ctx.violation(format!("GET /users lists {name}, a user no client created"));
        }
    }
    let dead = ctx.oracle().dead_tokens.all();
    for secret in &dead {
        if let Some((holder, _)) = token_login(ctx, secret).await? {
            ctx.violation(format!(
                "a token whose deletion (or its user's) was acknowledged logs in again, as user {holder}"
            ));
        }
    }
    ctx.oracle().counts.token_logins_tried += dead.len() as u64;
    for key in keys {
        let name = key.name();
        let (rec, kill_tick) = {
            let o = ctx.oracle();
            (o.users.get(&key).cloned().unwrap_or_default(), o.kill_tick)
        };
        let allowed = rec.allowed(kill_tick);
        let seen = match listed.get(&name) {
            Some((id, _)) => {
                let depth = Depth {
                    passwords: last || rec.password_may_differ(),
                    tokens: last || rec.tokens_may_differ(),
                };
                Some(read_user(ctx, &name, *id, &allowed, depth).await?)
            }
            None => None,
        };
        if let Some((_, active)) = listed.get(&name)
            && seen.as_ref().is_some_and(|s| s.active != *active)
        {
            ctx.violation(format!(
                "user {name}: GET /users and GET /users/{name} disagree on its status"
            ));
        }
        let judged = judge(&allowed, seen.as_ref());
        let mut o = ctx.oracle();
        let confirmed = match judged {
            Ok(i) => {
                if i > 0 {
                    o.counts.users_landed += 1;
                }
                allowed.get(i).cloned().flatten()
            }
            Err(why) => {
                o.violation(
                    ctx.cycle,
                    format!(
                        "user {name}: {why}; its changes since the last verification: {}",
                        rec.history()
                    ),
                );
                adopt(&allowed, seen.as_ref())
            }
        };
        if allowed.len() > 1 {
            o.counts.users_doubtful += 1;
        }
        o.counts.users_verified += 1;
        let live: BTreeSet<&String> = confirmed
            .iter()
            .flat_map(|a| a.tokens.values().flatten())
            .collect();
        for secret in rec.known_secrets() {
            if !live.contains(&secret) {
                o.dead_tokens.bury(secret);
            }
        }
        let entry = o.users.entry(key).or_default();
        entry.confirmed = confirmed;
        entry.ops.clear();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_one_seed_then_the_changes_drawn_are_the_same_and_only_of_what_exists() {
        let run = |seed: u64| {
            let mut rng = SimRng::from_parts(seed, &[1, 2]);
            let mut current: Option<Account> = None;
            let mut out = Vec::new();
            for _ in 0..200 {
                let change = draw(&mut rng, current.as_ref(), 0);
                // Token and password changes only of an existing user,
                // token ones only of an active one.
                match (&change, &current) {
                    (Change::Create(_), None) => {}
                    (Change::Create(_), Some(_)) => panic!("created twice"),
                    (_, None) => panic!("{change:?} of no user"),
                    (Change::CreateToken(n), Some(a)) => {
                        assert!(a.active && !a.tokens.contains_key(n));
                    }
                    (Change::DeleteToken(n), Some(a)) => {
                        assert!(a.active && a.tokens.contains_key(n));
                    }
                    _ => {}
                }
                current = change.apply(current.as_ref());
                out.push(change.what());
            }
            out
        };
        assert_eq!(run(3), run(3));
        assert_ne!(run(3), run(4));
        // Every kind of change is drawn.
        let kinds: BTreeSet<&str> = run(3).into_iter().collect();
        assert_eq!(kinds.len(), 8, "{kinds:?}");
    }
}
