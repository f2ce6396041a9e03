//! One contract, every backend; the probe tells the truth on each.

use bytes::Bytes;
use sluice_remote::contract;
use sluice_remote::{
    ConditionalCreate, RemoteStore, SimRemote, SimRemoteConfig, probe_conditional_create,
    probe_conditional_create_with_nonce,
};

use sluice_testkit::remote::{S3Server, key, local};

#[test]
fn sim_remote_keeps_the_contract() {
    let sim = SimRemote::default();
    contract::check(&sim, &key("inst/contract")).unwrap();
    assert!(sim.objects().is_empty());
}

#[test]
fn local_object_store_keeps_the_contract() {
    let (remote, _dir) = local();
    contract::check(&remote, &key("inst/contract")).unwrap();
}

#[test]
fn s3s_fs_over_object_store_aws_keeps_the_contract() {
    let server = S3Server::start();
    let remote = server.remote();
    contract::check(&remote, &key("inst/contract")).unwrap();
}

#[test]
fn a_double_that_overwrites_breaks_the_contract_at_the_second_create() {
    // Given a store that ignores create-only puts,
    let sim = SimRemote::new(SimRemoteConfig {
        ignores_conditional_writes: true,
    });
    // when the contract runs, then it names the check that caught it.
    let err = contract::check(&sim, &key("inst/contract")).unwrap_err();
    assert_eq!(err.check, "second create refused");
}

#[test]
fn the_probe_passes_where_create_only_is_honoured_and_cleans_up() {
    let prefix = key("inst");
    let sim = SimRemote::default();
    let report = probe_conditional_create_with_nonce(&sim, &prefix, 7).unwrap();
    assert_eq!(report.verdict, ConditionalCreate::Honoured);
    assert!(report.cleaned_up);
    assert_eq!(report.key.as_str(), "inst/_probe/create-0000000000000007");
    assert!(sim.objects().is_empty());

    let (remote, _dir) = local();
    let report = probe_conditional_create(&remote, &prefix).unwrap();
    assert_eq!(report.verdict, ConditionalCreate::Honoured);
    assert!(report.cleaned_up);
    assert!(remote.list(&prefix).unwrap().is_empty());
}

#[test]
fn the_probe_reports_a_store_that_ignores_conditional_writes() {
    // Given a double configured as garage behaves,
    let sim = SimRemote::new(SimRemoteConfig {
        ignores_conditional_writes: true,
    });
    // when probed, then the verdict is Ignored and the probe object is gone.
    let report = probe_conditional_create_with_nonce(&sim, &key("inst"), 1).unwrap();
    assert_eq!(report.verdict, ConditionalCreate::Ignored);
    assert!(report.cleaned_up);
    assert!(sim.objects().is_empty());
}

#[test]
fn the_probe_refuses_a_key_that_was_not_fresh_and_gives_no_verdict() {
    let sim = SimRemote::default();
    let k = key("inst/_probe/create-0000000000000003");
    sim.put_new(&k, Bytes::from_static(b"left by someone"))
        .unwrap();
    let err = probe_conditional_create_with_nonce(&sim, &key("inst"), 3).unwrap_err();
    assert!(
        matches!(err, sluice_remote::ProbeError::KeyNotFresh(_)),
        "{err}"
    );
}

#[test]
fn the_probe_on_s3s_fs_reports_what_s3s_fs_really_does() {
    // Given s3s-fs served in-process and reached through object_store's S3 client,
    let server = S3Server::start();
    let remote = server.remote();
    let k = key("truth/first");
    // when a create-only put is repeated by hand (what the probe does),
    remote.put_new(&k, Bytes::from_static(b"one")).unwrap();
    let second = remote.put_new(&k, Bytes::from_static(b"two"));
    let really_refused = matches!(&second, Err(e) if e.kind == sluice_remote::RemoteErrorKind::AlreadyExists)
        && remote.get_range(&k, 0..3).unwrap().as_ref() == b"one";
    remote.delete(&k).unwrap();
    // then the probe's verdict is exactly what the server did: s3s-fs 0.14.1 checks
    // `If-None-Match: *` before writing and answers 412, which object_store reports as
    // AlreadyExists.
    let report = probe_conditional_create(&remote, &key("inst")).unwrap();
    let expected = if really_refused {
        ConditionalCreate::Honoured
    } else {
        ConditionalCreate::Ignored
    };
    assert_eq!(report.verdict, expected);
    assert_eq!(
        report.verdict,
        ConditionalCreate::Honoured,
        "s3s-fs 0.14.1 honours If-None-Match: *"
    );
    assert!(report.cleaned_up);
    assert!(remote.list(&key("inst")).unwrap().is_empty());
}

#[test]
fn a_store_that_never_answers_is_unavailable_with_the_outcome_unknown() {
    // Given a listener that accepts connections and never answers,
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let remote = sluice_testkit::remote::s3_remote_at(addr);
    // when a put times out, then the error says which call, and that it may have applied.
    let err = remote
        .put_new(&key("a/b"), Bytes::from_static(b"x"))
        .unwrap_err();
    assert_eq!(
        err.kind,
        sluice_remote::RemoteErrorKind::Unavailable,
        "{err}"
    );
    assert_eq!(err.op, sluice_remote::RemoteOp::Put);
    assert_eq!(err.key, "a/b");
    assert!(err.may_have_applied());
    drop(listener);
}

#[test]
fn a_store_that_refuses_connections_is_unavailable() {
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let remote = sluice_testkit::remote::s3_remote_at(addr);
    let err = remote.delete(&key("a/b")).unwrap_err();
    assert_eq!(
        err.kind,
        sluice_remote::RemoteErrorKind::Unavailable,
        "{err}"
    );
    let err = remote.list(&key("a")).unwrap_err();
    assert_eq!(
        err.kind,
        sluice_remote::RemoteErrorKind::Unavailable,
        "{err}"
    );
    assert!(!err.may_have_applied(), "a listing changes nothing");
}

#[test]
fn s3s_fs_refuses_the_second_create_with_412_reported_as_already_exists() {
    let server = S3Server::start();
    let remote = server.remote();
    let k = key("detail/obj");
    remote.put_new(&k, Bytes::from_static(b"one")).unwrap();
    let err = remote.put_new(&k, Bytes::from_static(b"two")).unwrap_err();
    assert_eq!(err.kind, sluice_remote::RemoteErrorKind::AlreadyExists);
    assert!(err.detail.contains("412"), "{err}");
    // A range starting at the end is 416 on the wire, InvalidRequest here.
    let err = remote.get_range(&k, 3..4).unwrap_err();
    assert_eq!(err.kind, sluice_remote::RemoteErrorKind::InvalidRequest);
    assert!(err.detail.contains("status code: 416"), "{err}");
    // Wrong credentials are Other (outcome unknown, never "not found").
    let bad = sluice_remote::ObjectStoreRemote::s3(
        &sluice_remote::S3Settings {
            bucket: sluice_testkit::remote::BUCKET.into(),
            region: "us-east-1".into(),
            endpoint: Some(server.endpoint()),
            access_key_id: "AKIAWRONG".into(),
            secret_access_key: "wrong".into(),
            allow_http: true,
            max_retries: Some(0),
            ..sluice_remote::S3Settings::default()
        },
        sluice_remote::RuntimeHandle::owned().unwrap(),
    )
    .unwrap();
    let err = bad.head(&k).unwrap_err();
    assert_eq!(err.kind, sluice_remote::RemoteErrorKind::Other, "{err}");
    assert!(err.detail.contains("403"), "{err}");
}

#[test]
fn an_https_endpoint_builds_its_tls_client_on_ring_and_fails_as_unavailable() {
    // Given an https endpoint nobody listens on (reqwest is built without a TLS provider of
    // its own; the constructor installs ring as the process default),
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let remote = sluice_remote::ObjectStoreRemote::s3(
        &sluice_remote::S3Settings {
            bucket: sluice_testkit::remote::BUCKET.into(),
            region: "us-east-1".into(),
            endpoint: Some(format!("https://{addr}")),
            access_key_id: "AKIA".into(),
            secret_access_key: "secret".into(),
            max_retries: Some(0),
            ..sluice_remote::S3Settings::default()
        },
        sluice_remote::RuntimeHandle::owned().unwrap(),
    )
    .unwrap();
    // when called, then the client was built (no panic for a missing provider) and the
    // refused connection is Unavailable.
    let err = remote.head(&key("a/b")).unwrap_err();
    assert_eq!(
        err.kind,
        sluice_remote::RemoteErrorKind::Unavailable,
        "{err}"
    );
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
}

#[test]
fn the_probe_gives_no_verdict_when_the_second_create_is_unanswered() {
    // Given a store whose second create times out (the probe cannot know what it did),
    let sim = SimRemote::default();
    sim.fail_at(1, sluice_remote::RemoteFault::Late { delay: 1 });
    // when probed, then it is an error, not a verdict; the late put lands before the next
    // call and is refused there (the first object exists), and the clean-up removes that.
    let err = probe_conditional_create_with_nonce(&sim, &key("inst"), 9).unwrap_err();
    assert!(
        matches!(err, sluice_remote::ProbeError::Remote(ref e) if e.kind == sluice_remote::RemoteErrorKind::Unavailable),
        "{err}"
    );
    assert!(sim.objects().is_empty());
}

#[test]
fn the_probe_reports_a_clean_up_that_failed() {
    let sim = SimRemote::default();
    // Calls: put, put, get, delete.
    sim.fail_at(3, sluice_remote::RemoteFault::Before);
    let report = probe_conditional_create_with_nonce(&sim, &key("inst"), 4).unwrap();
    assert_eq!(report.verdict, ConditionalCreate::Honoured);
    assert!(!report.cleaned_up);
    assert_eq!(sim.objects().keys().next(), Some(&report.key));
}
