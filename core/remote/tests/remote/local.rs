//! What is specific to the real backend on the local file system.

use bytes::Bytes;
use sluice_remote::{RemoteStore, RuntimeHandle};
use sluice_storage::{DiskStorage, DurableStorage, OpenMode};

use sluice_testkit::remote::{key, local};

#[test]
fn calling_from_an_async_worker_panics_as_tokio_refuses_it() {
    // Given a remote blocking on a runtime,
    let (remote, _dir) = local();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    // when it is called on an async worker, then tokio's own check stops it (a programmer
    // error: the server must call from spawn_blocking or a thread it owns).
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(async { remote.head(&key("a/b")) })
    }));
    assert!(outcome.is_err(), "a call on an async worker must not run");
}

#[test]
fn a_call_from_a_spawn_blocking_thread_of_the_same_runtime_works() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let remote = sluice_remote::ObjectStoreRemote::local(
        dir.path(),
        RuntimeHandle::Borrowed(rt.handle().clone()),
    )
    .unwrap();
    let got = rt
        .block_on(async move {
            tokio::task::spawn_blocking(move || {
                remote.put_new(&key("a/b"), Bytes::from_static(b"xyz"))?;
                remote.head(&key("a/b"))
            })
            .await
        })
        .unwrap()
        .unwrap();
    assert_eq!(got, 3);
}

#[test]
fn files_sluice_never_writes_are_left_out_of_a_listing() {
    // Given a local store whose directory also holds a name no RemoteKey can be, and a
    // staging file of an interrupted put (`<key>#1`),
    let (remote, dir) = local();
    remote
        .put_new(&key("p/ok"), Bytes::from_static(b"1"))
        .unwrap();
    // (Through DiskStorage: only core/storage touches std::fs, tests/tidy.rs rule 2.)
    let disk = DiskStorage::new();
    for name in ["objects/p/has space", "objects/p/ok2#1"] {
        let f = disk
            .open(&dir.path().join(name), OpenMode::CreateNew)
            .unwrap();
        f.write_at(0, b"x").unwrap();
    }
    // when listed, then only the object sluice can name is returned.
    let listed = remote.list(&key("p")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, key("p/ok"));
}

#[test]
fn a_local_delete_of_a_missing_object_in_a_missing_directory_is_fine() {
    let (remote, _dir) = local();
    remote.delete(&key("no/such/dir/obj")).unwrap();
}
