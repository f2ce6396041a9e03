//! Users and permissions as Iggy has them (issue 29), through the
//! unmodified SDK: root creates a user that may only read one stream; it
//! can poll that stream and nothing else, over HTTP and over TCP; granting
//! `send_messages` lets it send; deleting it ends what it could do. The
//! users survive a restart. Personal access tokens log in as their user.
//! And what the Iggy CLI 0.14.0 showed differing from Iggy's server: a user
//! named by name reads itself and changes its own password; an inactive
//! holder's token is refused as Iggy refuses it; expired tokens are removed.

use std::collections::BTreeMap;

use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_testkit::http::{start_server, start_server_with};

const OPEN: &str = "open";
const CLOSED: &str = "closed";
const TOPIC: &str = "t";

async fn http_as(server: &RunningServer, user: &str, password: &str) -> HttpClient {
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user(user, password).await.unwrap();
    http
}

/// Read-only on stream `stream` (id), plus `send` if asked.
fn reader_of(stream: u32, send: bool) -> Permissions {
    Permissions {
        global: GlobalPermissions::default(),
        streams: Some(BTreeMap::from([(
            stream as usize,
            StreamPermissions {
                read_stream: true,
                send_messages: send,
                ..StreamPermissions::default()
            },
        )])),
    }
}

fn denied<T: std::fmt::Debug>(result: Result<T, IggyError>) -> bool {
    matches!(result, Err(IggyError::Unauthorized)) || matches!(&result, Err(e) if e.as_code() == 41)
}

async fn poll(client: &dyn Client, stream: &str) -> Result<PolledMessages, IggyError> {
    client
        .poll_messages(
            &Identifier::named(stream).unwrap(),
            &Identifier::named(TOPIC).unwrap(),
            Some(0),
            &Consumer::new(Identifier::numeric(1).unwrap()),
            &PollingStrategy::offset(0),
            10,
            false,
        )
        .await
}

async fn send(client: &dyn Client, stream: &str) -> Result<(), IggyError> {
    let mut batch = vec![IggyMessage::builder().payload("x".into()).build().unwrap()];
    client
        .send_messages(
            &Identifier::named(stream).unwrap(),
            &Identifier::named(TOPIC).unwrap(),
            &Partitioning::partition_id(0),
            &mut batch,
        )
        .await
        .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_user_that_may_read_one_stream_then_it_polls_that_stream_and_nothing_else() {
    // Given two streams with a message each, and a user that may read the first.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let root = http_as(&server, "iggy", "iggy").await;
    let mut ids = Vec::new();
    for name in [OPEN, CLOSED] {
        ids.push(root.create_stream(name).await.unwrap().id);
        root.create_topic(
            &Identifier::named(name).unwrap(),
            TOPIC,
            &TopicCreateOptions::default(),
        )
        .await
        .unwrap();
        send(&root, name).await.unwrap();
    }
    let created = root
        .create_user(
            "reader",
            "secret-1",
            UserStatus::Active,
            Some(reader_of(ids[0], false)),
        )
        .await
        .unwrap();
    assert_eq!(created.id, 1);

    // When it logs in, over HTTP and over TCP,
    let http = http_as(&server, "reader", "secret-1").await;
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_user("reader", "secret-1").await.unwrap();
    let clients: [&dyn Client; 2] = [&http, &tcp];
    for client in clients {
        // Then it reads its stream, and nothing else.
        assert_eq!(poll(client, OPEN).await.unwrap().messages.len(), 1);
        assert!(denied(poll(client, CLOSED).await));
        assert!(denied(send(client, OPEN).await));
        assert!(denied(client.create_stream("mine").await));
        assert!(denied(
            client
                .delete_stream(&Identifier::named(OPEN).unwrap())
                .await
        ));
    }
    assert!(denied(http.get_users().await));
    assert!(denied(tcp.get_users().await));
    // And the refused requests changed nothing.
    assert_eq!(root.get_streams().await.unwrap().len(), 2);

    // When root grants it send_messages on its stream, it sends there.
    root.update_permissions(
        &Identifier::numeric(1).unwrap(),
        Some(reader_of(ids[0], true)),
    )
    .await
    .unwrap();
    for client in clients {
        send(client, OPEN).await.unwrap();
        assert!(denied(send(client, CLOSED).await));
    }

    // And its user, permissions included, survives a restart.
    drop((http, tcp));
    server.shutdown().await.unwrap();
    let server = start_server(dir.path()).await;
    let root = http_as(&server, "iggy", "iggy").await;
    let http = http_as(&server, "reader", "secret-1").await;
    send(&http, OPEN).await.unwrap();
    let details = root
        .get_user(&Identifier::named("reader").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(details.permissions, Some(reader_of(ids[0], true)));

    // When root deletes it, its session can do nothing, and it cannot log in.
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_user("reader", "secret-1").await.unwrap();
    root.delete_user(&Identifier::numeric(1).unwrap())
        .await
        .unwrap();
    assert!(poll(&http, OPEN).await.is_err());
    assert!(denied(poll(&tcp, OPEN).await));
    // Not even once a new user has taken its id.
    root.create_user(
        "writer",
        "secret-2",
        UserStatus::Active,
        Some(reader_of(ids[0], true)),
    )
    .await
    .unwrap();
    assert!(denied(poll(&tcp, OPEN).await));
    let again = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    assert!(again.login_user("reader", "secret-1").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_users_commands_over_tcp_then_they_agree_with_http() {
    // Given root over TCP and over HTTP, and a stream.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = sluice_testkit::tcp::sdk_login(&server).await;
    let http = http_as(&server, "iggy", "iggy").await;
    let stream = tcp.create_stream(OPEN).await.unwrap().id;

    // When root creates a user over TCP, with stream and topic grants,
    let mut permissions = reader_of(stream, true);
    if let Some(s) = permissions
        .streams
        .as_mut()
        .and_then(|m| m.get_mut(&(stream as usize)))
    {
        s.topics = Some(BTreeMap::from([(
            3,
            TopicPermissions {
                manage_topic: true,
                ..TopicPermissions::default()
            },
        )]));
    }
    permissions.global.read_servers = true;
    let created = tcp
        .create_user(
            "tcp-user",
            "secret-3",
            UserStatus::Active,
            Some(permissions.clone()),
        )
        .await
        .unwrap();
    assert_eq!((created.id, created.username.as_str()), (1, "tcp-user"));

    // Then both transports read it back the same, permissions included.
    let id = Identifier::numeric(1).unwrap();
    let clients: [&dyn Client; 2] = [&tcp, &http];
    for client in clients {
        let details = client.get_user(&id).await.unwrap().unwrap();
        assert_eq!(details.permissions.as_ref(), Some(&permissions));
        let names: Vec<String> = client
            .get_users()
            .await
            .unwrap()
            .into_iter()
            .map(|u| u.username)
            .collect();
        assert_eq!(names, ["iggy", "tcp-user"]);
    }
    assert!(
        tcp.get_user(&Identifier::numeric(9).unwrap())
            .await
            .unwrap()
            .is_none()
    );

    // And it changes its own password over TCP, renamed and deactivated by root.
    let own = sluice_testkit::tcp::sdk_client(&server).await;
    own.login_user("tcp-user", "secret-3").await.unwrap();
    own.change_password(&id, "secret-3", "secret-4")
        .await
        .unwrap();
    assert!(denied(own.update_permissions(&id, None).await));
    let fresh = sluice_testkit::tcp::sdk_client(&server).await;
    fresh.login_user("tcp-user", "secret-4").await.unwrap();
    tcp.update_user(
        &id,
        Some("renamed"),
        Some(UserStatus::Inactive),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();
    let details = http.get_user(&id).await.unwrap().unwrap();
    assert_eq!(
        (details.username.as_str(), details.status),
        ("renamed", UserStatus::Inactive)
    );
    let late = sluice_testkit::tcp::sdk_client(&server).await;
    assert!(late.login_user("renamed", "secret-4").await.is_err());

    // And root's permissions cannot be changed, nor root deleted; the user can be.
    assert!(
        tcp.update_permissions(&Identifier::numeric(0).unwrap(), None)
            .await
            .is_err()
    );
    assert!(
        tcp.delete_user(&Identifier::numeric(0).unwrap())
            .await
            .is_err()
    );
    tcp.delete_user(&id).await.unwrap();
    assert!(http.get_user(&id).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_personal_access_token_then_it_logs_in_with_its_users_permissions_until_deleted() {
    // Given a user that may read one stream, with a token it created over HTTP.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let root = http_as(&server, "iggy", "iggy").await;
    let open = root.create_stream(OPEN).await.unwrap().id;
    root.create_topic(
        &Identifier::named(OPEN).unwrap(),
        TOPIC,
        &TopicCreateOptions::default(),
    )
    .await
    .unwrap();
    send(&root, OPEN).await.unwrap();
    root.create_user(
        "svc",
        "secret-5",
        UserStatus::Active,
        Some(reader_of(open, false)),
    )
    .await
    .unwrap();
    let svc = http_as(&server, "svc", "secret-5").await;
    let raw = svc
        .create_personal_access_token("service", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    assert_eq!(raw.token.len(), 68);
    // A name is unique per user, and within Iggy's bounds.
    assert!(
        svc.create_personal_access_token("service", PersonalAccessTokenExpiry::NeverExpire)
            .await
            .is_err()
    );
    assert!(
        svc.create_personal_access_token("ab", PersonalAccessTokenExpiry::NeverExpire)
            .await
            .is_err()
    );

    // When it logs in with the token, over TCP and over HTTP,
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    let identity = tcp
        .login_with_personal_access_token(&raw.token)
        .await
        .unwrap();
    assert_eq!(identity.user_id, 1);
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_with_personal_access_token(&raw.token)
        .await
        .unwrap();
    // Then it carries the user's permissions, and lists its tokens.
    let clients: [&dyn Client; 2] = [&tcp, &http];
    for client in clients {
        assert_eq!(poll(client, OPEN).await.unwrap().messages.len(), 1);
        assert!(denied(client.create_stream("mine").await));
        let names: Vec<String> = client
            .get_personal_access_tokens()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(names, ["service"]);
    }
    // Root's tokens are its own.
    assert!(root.get_personal_access_tokens().await.unwrap().is_empty());

    // And the token, kept only as a hash, survives a restart.
    drop((tcp, http));
    server.shutdown().await.unwrap();
    assert!(
        !std::fs::read(dir.path().join("users"))
            .unwrap()
            .windows(raw.token.len())
            .any(|w| w == raw.token.as_bytes())
    );
    let server = start_server(dir.path()).await;
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_with_personal_access_token(&raw.token)
        .await
        .unwrap();

    // When it is deleted, it no longer logs in; nor does a token of a deleted user.
    tcp.delete_personal_access_token("service").await.unwrap();
    let late = sluice_testkit::tcp::sdk_client(&server).await;
    assert!(
        late.login_with_personal_access_token(&raw.token)
            .await
            .is_err()
    );
    let other = tcp
        .create_personal_access_token("other", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    let root = http_as(&server, "iggy", "iggy").await;
    root.delete_user(&Identifier::numeric(1).unwrap())
        .await
        .unwrap();
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    assert!(
        http.login_with_personal_access_token(&other.token)
            .await
            .is_err()
    );
}

/// The status of `GET /streams/open` with `token` as the bearer.
async fn status_with(address: std::net::SocketAddr, token: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("http://{address}/streams/{OPEN}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn unauthenticated<T: std::fmt::Debug>(result: Result<T, IggyError>) -> bool {
    matches!(&result, Err(e) if e.as_code() == IggyError::Unauthenticated.as_code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_http_logins_when_the_server_restarts_then_tokens_stay_valid_and_logouts_stay_out() {
    // Given a user's SDK HTTP clients: one logged in, one that refreshed its
    // token, one that logged out.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let address = server.local_addr;
    let root = http_as(&server, "iggy", "iggy").await;
    let open = root.create_stream(OPEN).await.unwrap().id;
    root.create_user(
        "web",
        "secret-7",
        UserStatus::Active,
        Some(reader_of(open, false)),
    )
    .await
    .unwrap();
    let logged_in = http_as(&server, "web", "secret-7").await;
    let refreshed = http_as(&server, "web", "secret-7").await;
    refreshed.refresh_access_token().await.unwrap();
    let left = HttpClient::new(&format!("http://{address}")).unwrap();
    let identity = left.login_user("web", "secret-7").await.unwrap();
    let left_token = identity.access_token.unwrap().token;
    assert_eq!(status_with(address, &left_token).await, 200);
    left.logout_user().await.unwrap();
    assert_eq!(status_with(address, &left_token).await, 401);

    // When the server restarts on the same address and data directory,
    server.shutdown().await.unwrap();
    let server = start_server_with(dir.path(), |c| c.http.address = address).await;

    // Then the logged-out token is still refused,
    assert_eq!(status_with(address, &left_token).await, 401);
    // and the login and the refreshed token still act as the user, with
    // its permissions: nobody had to log in again.
    for client in [&logged_in, &refreshed] {
        let stream = client
            .get_stream(&Identifier::named(OPEN).unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stream.id, open);
        assert!(denied(client.create_stream("mine").await));
    }

    // And deleting the user ends its tokens (401, never a later user's
    // grants), even once a new user took its id.
    let root = http_as(&server, "iggy", "iggy").await;
    root.delete_user(&Identifier::named("web").unwrap())
        .await
        .unwrap();
    root.create_user(
        "next",
        "secret-8",
        UserStatus::Active,
        Some(reader_of(open, true)),
    )
    .await
    .unwrap();
    assert!(unauthenticated(logged_in.get_streams().await));
    assert!(unauthenticated(refreshed.get_streams().await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_root_renamed_and_its_password_changed_then_the_change_survives_a_restart() {
    // Given a server started with the default root credentials.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_user("iggy", "iggy").await.unwrap();
    let root = Identifier::numeric(0).unwrap();

    // Root cannot lock itself out, nor take a user's name.
    assert!(
        tcp.update_user(
            &root,
            None,
            Some(UserStatus::Inactive),
            &UserUpdateOptions::default()
        )
        .await
        .is_err()
    );
    tcp.create_user("taken", "secret-9", UserStatus::Active, None)
        .await
        .unwrap();
    assert!(
        tcp.update_user(&root, Some("taken"), None, &UserUpdateOptions::default())
            .await
            .is_err()
    );

    // When root is renamed and given a new password, as Iggy allows,
    tcp.update_user(&root, Some("admin"), None, &UserUpdateOptions::default())
        .await
        .unwrap();
    assert!(
        tcp.change_password(&root, "wrong", "new-secret")
            .await
            .is_err()
    );
    tcp.change_password(&root, "iggy", "new-secret")
        .await
        .unwrap();
    let http = http_as(&server, "admin", "new-secret").await;
    let me = http.get_user(&root).await.unwrap().unwrap();
    assert_eq!((me.id, me.username.as_str()), (0, "admin"));

    // Then, after a restart that configures the default credentials again,
    // the changed ones are root's (the configuration only created it).
    drop((tcp, http));
    server.shutdown().await.unwrap();
    let server = start_server(dir.path()).await;
    let old = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    assert!(old.login_user("iggy", "iggy").await.is_err());
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    let identity = tcp.login_user("admin", "new-secret").await.unwrap();
    assert_eq!(identity.user_id, 0);
    assert_eq!(tcp.get_users().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_user_without_permissions_then_it_reads_itself_and_changes_its_password_by_name() {
    // Given a user with no permission at all, logged in over TCP and HTTP
    // (the Iggy CLI names users by name: `iggy user get me-myself`).
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let root = http_as(&server, "iggy", "iggy").await;
    root.create_user("me-myself", "secret-6", UserStatus::Active, None)
        .await
        .unwrap();
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    tcp.login_user("me-myself", "secret-6").await.unwrap();
    let http = http_as(&server, "me-myself", "secret-6").await;
    let me = Identifier::named("me-myself").unwrap();
    let passwords = ["secret-6", "secret-7", "secret-8"];
    let clients: [&dyn Client; 2] = [&tcp, &http];
    for (client, change) in clients.into_iter().zip(passwords.windows(2)) {
        // When it reads itself by name, then it gets itself.
        let details = client.get_user(&me).await.unwrap().unwrap();
        assert_eq!((details.id, details.permissions), (1, None));
        // And a user that does not exist is not found, as for anyone, while
        // another existing user (root) is refused.
        assert!(
            client
                .get_user(&Identifier::named("nobody").unwrap())
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            client
                .get_user(&Identifier::numeric(9).unwrap())
                .await
                .unwrap()
                .is_none()
        );
        assert!(denied(
            client.get_user(&Identifier::named("iggy").unwrap()).await
        ));
        // When it changes its own password by name, then it is changed.
        client
            .change_password(&me, change[0], change[1])
            .await
            .unwrap();
        let nobody = client
            .change_password(&Identifier::named("nobody").unwrap(), change[1], "x-1234")
            .await;
        assert!(nobody.is_err() && !denied(nobody));
    }
    let late = sluice_testkit::tcp::sdk_client(&server).await;
    late.login_user("me-myself", "secret-8").await.unwrap();
    // And it still cannot change root's password, nor read the users.
    assert!(denied(
        late.change_password(&Identifier::named("iggy").unwrap(), "iggy", "iggy-2")
            .await
    ));
    assert!(denied(late.get_users().await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_inactive_users_token_then_its_login_is_refused_as_iggy_refuses_it() {
    // Given a user's token, and the user deactivated by root.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let root = http_as(&server, "iggy", "iggy").await;
    root.create_user("sleepy", "secret-9", UserStatus::Active, None)
        .await
        .unwrap();
    let own = http_as(&server, "sleepy", "secret-9").await;
    let raw = own
        .create_personal_access_token("nap", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    let id = Identifier::named("sleepy").unwrap();
    root.update_user(
        &id,
        None,
        Some(UserStatus::Inactive),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();

    // When it logs in with the token, then TCP answers what Iggy's eviction
    // of an inactive user becomes in the SDK, unauthenticated, and HTTP
    // Iggy's user_inactive (47, a 400), not an invalid token.
    let tcp = sluice_testkit::tcp::sdk_client(&server).await;
    let refused = tcp.login_with_personal_access_token(&raw.token).await;
    assert!(
        matches!(refused, Err(IggyError::Unauthenticated)),
        "{refused:?}"
    );
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    let refused = http.login_with_personal_access_token(&raw.token).await;
    assert!(
        matches!(&refused, Err(IggyError::HttpResponseError(400, body)) if body.contains("\"id\":47")),
        "{refused:?}"
    );

    // And once active again, the token logs in.
    root.update_user(
        &id,
        None,
        Some(UserStatus::Active),
        &UserUpdateOptions::default(),
    )
    .await
    .unwrap();
    let again = sluice_testkit::tcp::sdk_client(&server).await;
    again
        .login_with_personal_access_token(&raw.token)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_expired_token_then_the_cleaner_removes_it_as_iggys_does() {
    // Given a server whose token cleaner runs often (Iggy's: every minute),
    // and root's tokens that expire in a second and never.
    let dir = tempfile::tempdir().unwrap();
    let server = sluice_testkit::http::start_server_with(dir.path(), |c| {
        c.auth.token_cleaner_period = std::time::Duration::from_millis(50);
    })
    .await;
    let root = sluice_testkit::tcp::sdk_login(&server).await;
    let second = PersonalAccessTokenExpiry::ExpireDuration(IggyDuration::from(
        std::time::Duration::from_secs(1),
    ));
    let short = root
        .create_personal_access_token("short", second)
        .await
        .unwrap();
    root.create_personal_access_token("long", PersonalAccessTokenExpiry::NeverExpire)
        .await
        .unwrap();
    let names = || async {
        root.get_personal_access_tokens()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names().await, ["long", "short"]);

    // When it has expired, then it no longer logs in, and the cleaner
    // removes it; the other stays.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while names().await.len() > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the expired token is still listed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(names().await, ["long"]);
    let late = sluice_testkit::tcp::sdk_client(&server).await;
    assert!(
        late.login_with_personal_access_token(&short.token)
            .await
            .is_err()
    );
}
