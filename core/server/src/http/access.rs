//! What each authenticated HTTP route needs (`iggy::access::Need`), read
//! from its method, its path template and its path parameters, so the
//! check runs once, in `auth::require_token`, before any handler.
//!
//! Invariants:
//! - Every authenticated route has an entry (`need`); a route without one
//!   is refused, never let through (the test walks the route table).
//! - sluice's own routes (`/status/*`, `/metrics`) need `read_servers`,
//!   as Iggy's server information does.

use std::collections::HashMap;

use axum::http::Method;

use super::extract::identifier;
use crate::iggy::access::Need;
use crate::iggy::error::{ApiError, ApiResult};

const TOPIC: &str = "/streams/{stream_id}/topics/{topic_id}";

/// The need of `method` on the route `template`, its targets taken from
/// `params`.
pub(crate) fn need(
    method: &Method,
    template: &str,
    params: &HashMap<String, String>,
) -> ApiResult<Need> {
    let stream = || identifier("stream_id", param(params, "stream_id")?);
    let topic = || {
        Ok::<_, ApiError>((
            stream()?,
            identifier("topic_id", param(params, "topic_id")?)?,
        ))
    };
    // A user, named by id or name, may read itself and change its own
    // password (`AppState::authorize` resolves it).
    let user = || identifier("user_id", param(params, "user_id")?);
    let m = method.as_str();
    let under_topic = template.strip_prefix(TOPIC);
    Ok(match (m, template, under_topic) {
        ("DELETE", "/users/logout", _) => Need::Authenticated,
        // Personal access tokens: each caller's own.
        ("GET" | "POST", "/personal-access-tokens", _) => Need::Authenticated,
        ("DELETE", "/personal-access-tokens/{name}", _) => Need::Authenticated,
        ("GET", "/users", _) => Need::ReadUsers,
        ("POST", "/users", _) => Need::ManageUsers,
        ("GET", "/users/{user_id}", _) => Need::ReadUser(user()?),
        ("PUT" | "DELETE", "/users/{user_id}", _) => Need::ManageUsers,
        ("PUT", "/users/{user_id}/permissions", _) => Need::ManageUsers,
        ("PUT", "/users/{user_id}/password", _) => Need::ChangePassword(user()?),
        ("GET", "/streams", _) => Need::GetStreams,
        ("POST", "/streams", _) => Need::CreateStream,
        ("GET", "/streams/{stream_id}", _) => Need::GetStream(stream()?),
        ("PUT" | "DELETE", "/streams/{stream_id}", _) => Need::ManageStream(stream()?),
        ("DELETE", "/streams/{stream_id}/purge", _) => Need::ManageStream(stream()?),
        ("GET", "/streams/{stream_id}/topics", _) => Need::GetTopics(stream()?),
        ("POST", "/streams/{stream_id}/topics", _) => Need::CreateTopic(stream()?),
        (_, _, Some(rest)) => {
            let (s, t) = topic()?;
            match (m, rest) {
                ("GET", "") => Need::GetTopic(s, t),
                ("PUT" | "DELETE", "") => Need::ManageTopic(s, t),
                ("DELETE", "/purge") => Need::ManageTopic(s, t),
                ("POST" | "DELETE", "/partitions") => Need::ManageTopic(s, t),
                ("GET", "/messages") => Need::Poll(s, t),
                ("POST", "/messages") => Need::Send(s, t),
                (_, "/consumer-offsets" | "/consumer-offsets/{consumer_id}") => Need::Poll(s, t),
                (_, "/consumer-groups" | "/consumer-groups/{group_id}") => Need::GetTopic(s, t),
                _ => return Err(unmapped(m, template)),
            }
        }
        ("GET", "/stats" | "/clients" | "/clients/{client_id}", _) => Need::ReadServers,
        ("GET", "/status/purge" | "/status/obligations" | "/metrics", _) => Need::ReadServers,
        ("GET", "/cluster/metadata", _) => Need::Authenticated,
        _ => return Err(unmapped(m, template)),
    })
}

fn param<'a>(params: &'a HashMap<String, String>, name: &str) -> ApiResult<&'a str> {
    params
        .get(name)
        .map(String::as_str)
        .ok_or_else(|| ApiError::bad_request(name, format!("{name} is missing")))
}

/// A route with no entry here: refused (fails closed), and logged, since it
/// is a programmer's error.
fn unmapped(method: &str, template: &str) -> ApiError {
    tracing::error!(method, template, "a route has no permission entry; refused");
    ApiError::unauthorized()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_every_authenticated_route_then_it_has_a_need() {
        for (method, template) in crate::http::authenticated_routes() {
            // Every parameter a route names, with a plausible value.
            let params: HashMap<String, String> = template
                .split('/')
                .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
                .map(|name| (name.to_string(), "1".to_string()))
                .collect();
            let method = Method::from_bytes(method.as_bytes()).unwrap();
            assert!(
                need(&method, &template, &params).is_ok(),
                "{method} {template} has no permission entry"
            );
        }
        let none = HashMap::new();
        assert!(need(&Method::GET, "/nowhere", &none).is_err());
    }

    #[test]
    fn given_each_route_then_it_needs_what_iggys_table_says() {
        use crate::identifier::Identifier;
        let (s, t) = (Identifier::Numeric(1), Identifier::Numeric(2));
        let st = |p: &str| format!("{TOPIC}{p}");
        let table: Vec<(Method, String, Need)> = vec![
            (Method::GET, "/streams".into(), Need::GetStreams),
            (Method::POST, "/streams".into(), Need::CreateStream),
            (
                Method::GET,
                "/streams/{stream_id}".into(),
                Need::GetStream(s.clone()),
            ),
            (
                Method::PUT,
                "/streams/{stream_id}".into(),
                Need::ManageStream(s.clone()),
            ),
            (
                Method::DELETE,
                "/streams/{stream_id}/purge".into(),
                Need::ManageStream(s.clone()),
            ),
            (
                Method::GET,
                "/streams/{stream_id}/topics".into(),
                Need::GetTopics(s.clone()),
            ),
            (
                Method::POST,
                "/streams/{stream_id}/topics".into(),
                Need::CreateTopic(s.clone()),
            ),
            (Method::GET, st(""), Need::GetTopic(s.clone(), t.clone())),
            (
                Method::DELETE,
                st(""),
                Need::ManageTopic(s.clone(), t.clone()),
            ),
            (
                Method::DELETE,
                st("/purge"),
                Need::ManageTopic(s.clone(), t.clone()),
            ),
            (
                Method::POST,
                st("/partitions"),
                Need::ManageTopic(s.clone(), t.clone()),
            ),
            (
                Method::GET,
                st("/messages"),
                Need::Poll(s.clone(), t.clone()),
            ),
            (
                Method::POST,
                st("/messages"),
                Need::Send(s.clone(), t.clone()),
            ),
            (
                Method::PUT,
                st("/consumer-offsets"),
                Need::Poll(s.clone(), t.clone()),
            ),
            (
                Method::POST,
                st("/consumer-groups"),
                Need::GetTopic(s.clone(), t.clone()),
            ),
            (Method::GET, "/stats".into(), Need::ReadServers),
            (Method::GET, "/metrics".into(), Need::ReadServers),
            (Method::GET, "/status/obligations".into(), Need::ReadServers),
            (Method::GET, "/cluster/metadata".into(), Need::Authenticated),
            (Method::GET, "/users".into(), Need::ReadUsers),
            (Method::POST, "/users".into(), Need::ManageUsers),
            (
                Method::GET,
                "/users/{user_id}".into(),
                Need::ReadUser(Identifier::Numeric(3)),
            ),
            (
                Method::PUT,
                "/users/{user_id}/permissions".into(),
                Need::ManageUsers,
            ),
            (
                Method::PUT,
                "/users/{user_id}/password".into(),
                Need::ChangePassword(Identifier::Numeric(3)),
            ),
        ];
        let params: HashMap<String, String> =
            [("stream_id", "1"), ("topic_id", "2"), ("user_id", "3")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        for (method, template, expected) in table {
            assert_eq!(
                need(&method, &template, &params).unwrap(),
                expected,
                "{method} {template}"
            );
        }
    }
}
