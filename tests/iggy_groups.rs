//! Consumer groups as an Iggy application uses them (issue 28): the official
//! SDK's high-level `IggyConsumer` with a consumer group, auto-join and
//! auto-commit, over TCP (Iggy's HTTP API has no group membership), against
//! sluice unchanged; and the wire answers of Iggy 0.11 for the calls around
//! membership (join twice, leave when not a member, a poll or a commit by a
//! non-member, members in the group's details and the client's).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use iggy::prelude::*;
use sluice_server::server::RunningServer;
use sluice_testkit::http::start_server;
use sluice_testkit::tcp::{sdk_login, tcp_addr};

const STREAM: &str = "orders";
const TOPIC: &str = "events";
const GROUP: &str = "workers";
const PARTITIONS: u32 = 4;

/// What one member was handed: `(partition, offset)` → payload, per member.
type Deliveries = Arc<Mutex<Vec<(usize, u32, u64, String)>>>;

/// A high-level client of its own (its own TCP connection), logged in.
async fn app_client(server: &RunningServer) -> IggyClient {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(tcp_addr(server).to_string())
        .build()
        .unwrap();
    client.connect().await.unwrap();
    client.login_user("iggy", "iggy").await.unwrap();
    client
}

/// The stream, topic and group of these tests, by name.
fn ids() -> (Identifier, Identifier, Identifier) {
    (
        Identifier::named(STREAM).unwrap(),
        Identifier::named(TOPIC).unwrap(),
        Identifier::named(GROUP).unwrap(),
    )
}

/// The SDK's HTTP client, logged in.
async fn http_login(server: &RunningServer) -> HttpClient {
    let http = HttpClient::new(&format!("http://{}", server.local_addr)).unwrap();
    http.login_user("iggy", "iggy").await.unwrap();
    http
}

/// Given: a topic of four partitions with `per_partition` messages in each.
async fn topic_with_messages(server: &RunningServer, per_partition: u32) -> TcpClient {
    let admin = sdk_login(server).await;
    admin.create_stream(STREAM).await.unwrap();
    admin
        .create_topic(
            &STREAM.try_into().unwrap(),
            TOPIC,
            &TopicCreateOptions {
                partitions_count: Some(PARTITIONS),
                ..TopicCreateOptions::default()
            },
        )
        .await
        .unwrap();
    send(&admin, 0, per_partition).await;
    admin
}

/// Sends `count` messages to every partition, numbered from `from`.
async fn send(client: &TcpClient, from: u32, count: u32) {
    if count == 0 {
        return;
    }
    for p in 0..PARTITIONS {
        let mut batch: Vec<IggyMessage> = (from..from + count)
            .map(|i| {
                IggyMessage::builder()
                    .payload(format!("p{p}-m{i}").into())
                    .build()
                    .unwrap()
            })
            .collect();
        client
            .send_messages(
                &STREAM.try_into().unwrap(),
                &TOPIC.try_into().unwrap(),
                &Partitioning::partition_id(p),
                &mut batch,
            )
            .await
            .unwrap();
    }
}

/// A member of the group as Iggy's documentation builds one: created if
/// missing, joined at `init`, committing each message as it is consumed.
async fn member(client: &IggyClient) -> IggyConsumer {
    let mut consumer = client
        .consumer_group(GROUP, STREAM, TOPIC)
        .unwrap()
        .create_consumer_group_if_not_exists()
        .auto_join_consumer_group()
        .auto_commit(AutoCommit::When(AutoCommitWhen::ConsumingEachMessage))
        .polling_strategy(PollingStrategy::next())
        .poll_interval(IggyDuration::from_str("5ms").unwrap())
        .batch_length(7)
        .build();
    consumer.init().await.unwrap();
    consumer
}

/// Consumes on its own task, recording each message under member `index`.
fn consume(
    index: usize,
    mut consumer: IggyConsumer,
    seen: Deliveries,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(next) = consumer.next().await {
            let Ok(m) = next else { continue };
            let payload = String::from_utf8_lossy(&m.message.payload).to_string();
            seen.lock()
                .unwrap()
                .push((index, m.partition_id, m.message.header.offset, payload));
        }
    })
}

/// Waits until `expected` distinct messages were delivered, or 30 s.
async fn wait_for(seen: &Deliveries, expected: usize) -> BTreeMap<(u32, u64), Vec<usize>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let by_message = delivered(seen);
        if by_message.len() >= expected || tokio::time::Instant::now() > deadline {
            return by_message;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Each delivered `(partition, offset)` and the members it went to.
fn delivered(seen: &Deliveries) -> BTreeMap<(u32, u64), Vec<usize>> {
    let mut out: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
    for (member, p, offset, payload) in seen.lock().unwrap().iter() {
        assert_eq!(
            payload,
            &format!("p{p}-m{offset}"),
            "a message served at the wrong place"
        );
        out.entry((*p, *offset)).or_default().push(*member);
    }
    out
}

fn every_message(per_partition: u32) -> Vec<(u32, u64)> {
    (0..PARTITIONS)
        .flat_map(|p| (0..u64::from(per_partition)).map(move |o| (p, o)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_members_joining_one_by_one_when_they_consume_then_the_group_gets_every_message_once()
{
    // Given: 4 partitions of 60 messages, and one member consuming.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = topic_with_messages(&server, 60).await;
    let seen: Deliveries = Arc::default();
    let clients = [
        app_client(&server).await,
        app_client(&server).await,
        app_client(&server).await,
    ];
    let mut tasks = vec![consume(0, member(&clients[0]).await, seen.clone())];

    // When: a second and a third member join while it consumes, and more
    // messages arrive after each join,
    wait_for(&seen, 30).await;
    tasks.push(consume(1, member(&clients[1]).await, seen.clone()));
    send(&admin, 60, 20).await;
    wait_for(&seen, 150).await;
    tasks.push(consume(2, member(&clients[2]).await, seen.clone()));
    send(&admin, 80, 20).await;

    // then every message reaches the group, none twice, and the partitions
    // were shared (more than one member consumed).
    let got = wait_for(&seen, every_message(100).len()).await;
    let missing: Vec<(u32, u64)> = every_message(100)
        .into_iter()
        .filter(|m| !got.contains_key(m))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    let twice: Vec<_> = got
        .iter()
        .filter(|(_, members)| members.len() > 1)
        .collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let members: std::collections::BTreeSet<usize> = got.values().flatten().copied().collect();
    assert!(members.len() > 1, "one member consumed everything");
    for task in tasks {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_member_whose_connection_dies_mid_stream_then_the_others_take_its_partitions_and_skip_nothing()
 {
    // Given: two members consuming 4 partitions of 50 messages.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = topic_with_messages(&server, 50).await;
    let seen: Deliveries = Arc::default();
    let survivor = app_client(&server).await;
    let doomed = app_client(&server).await;
    let kept = consume(0, member(&survivor).await, seen.clone());
    let lost = consume(1, member(&doomed).await, seen.clone());
    wait_for(&seen, 60).await;

    // When: the second member's connection is cut (no leave), and more
    // messages arrive,
    lost.abort();
    doomed.disconnect().await.unwrap();
    drop(doomed);
    send(&admin, 50, 25).await;

    // then the survivor gets every message the group had not committed:
    // nothing is skipped, and only what the dead member was handed and had
    // not committed may come again.
    let got = wait_for(&seen, every_message(75).len()).await;
    let missing: Vec<(u32, u64)> = every_message(75)
        .into_iter()
        .filter(|m| !got.contains_key(m))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    for (message, members) in &got {
        assert!(
            members.len() == 1 || members.contains(&1),
            "{message:?} delivered twice without the dead member: {members:?}"
        );
    }
    kept.abort();
}

/// Iggy 0.11's answers around membership, over the SDK's low-level client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_membership_calls_then_sluice_answers_as_iggy_does() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = topic_with_messages(&server, 3).await;
    let (s, t, g) = ids();
    admin.create_consumer_group(&s, &t, GROUP).await.unwrap();
    let member = sdk_login(&server).await;
    let outsider = sdk_login(&server).await;
    let group = Consumer::group(g.clone());

    // An unknown group: 5000. Joining twice: fine.
    let unknown = Identifier::named("nobody").unwrap();
    let err = member
        .join_consumer_group(&s, &t, &unknown)
        .await
        .unwrap_err();
    assert_eq!(err.as_code(), 5000, "{err}");
    member.join_consumer_group(&s, &t, &g).await.unwrap();
    member.join_consumer_group(&s, &t, &g).await.unwrap();

    // The group's details list the one member with all four partitions,
    // and the member's own details list the group.
    let details = admin.get_consumer_group(&s, &t, &g).await.unwrap().unwrap();
    assert_eq!(details.members_count, 1);
    assert_eq!(details.members[0].partitions, [0, 1, 2, 3]);
    let me = member.get_me().await.unwrap();
    assert_eq!(me.consumer_groups_count, 1);
    assert_eq!(
        (
            me.consumer_groups[0].stream_id,
            me.consumer_groups[0].group_id
        ),
        (0, 0)
    );
    // Over HTTP too: the group's members and the client's groups.
    let http = http_login(&server).await;
    let details = http.get_consumer_group(&s, &t, &g).await.unwrap().unwrap();
    assert_eq!(details.members_count, 1);
    assert_eq!(details.members[0].partitions, [0, 1, 2, 3]);
    let listed = http.get_client(me.client_id).await.unwrap().unwrap();
    assert_eq!(listed.consumer_groups_count, 1);
    assert_eq!(listed.consumer_groups[0].group_id, 0);

    // A non-member's group poll: an empty answer, nothing served (the SDK
    // reports 5006 itself); its commit for a partition: 5009.
    let polled = outsider
        .poll_messages(&s, &t, Some(0), &group, &PollingStrategy::next(), 10, false)
        .await;
    assert!(polled.map(|p| p.messages.is_empty()).unwrap_or(true));
    let err = outsider
        .store_consumer_offset(&group, &s, &t, Some(0), 1)
        .await
        .unwrap_err();
    assert_eq!(err.as_code(), 5009, "{err}");

    // The member polls and commits.
    let polled = member
        .poll_messages(&s, &t, Some(2), &group, &PollingStrategy::next(), 10, true)
        .await
        .unwrap();
    assert_eq!(polled.messages.len(), 3);
    member
        .store_consumer_offset(&group, &s, &t, Some(2), 1)
        .await
        .unwrap();

    // Leaving twice: the second is 5006. A closed connection leaves too.
    member.leave_consumer_group(&s, &t, &g).await.unwrap();
    let err = member.leave_consumer_group(&s, &t, &g).await.unwrap_err();
    assert_eq!(err.as_code(), 5006, "{err}");
    outsider.join_consumer_group(&s, &t, &g).await.unwrap();
    outsider.disconnect().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let details = admin.get_consumer_group(&s, &t, &g).await.unwrap().unwrap();
        if details.members_count == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{details:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A deleted group's id is not given out again (Iggy 0.11).
    admin.delete_consumer_group(&s, &t, &g).await.unwrap();
    let again = admin.create_consumer_group(&s, &t, GROUP).await.unwrap();
    assert_eq!(again.id, 1);
}

/// Named consumers map to the number Iggy maps them to, over both
/// transports, so a name finds the same stored offset everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_named_consumer_then_its_offset_is_the_one_of_iggys_number_on_both_transports() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = topic_with_messages(&server, 5).await;
    let http = http_login(&server).await;
    let (s, t, _) = ids();
    let named = Consumer::new(Identifier::named("my-consumer").unwrap());
    // XXH32("my-consumer"), as Iggy computes it.
    let numbered = Consumer::new(Identifier::numeric(2_115_191_887).unwrap());

    tcp.store_consumer_offset(&named, &s, &t, Some(1), 3)
        .await
        .unwrap();
    for client in [&tcp as &dyn Client, &http as &dyn Client] {
        for consumer in [&named, &numbered] {
            let got = client
                .get_consumer_offset(consumer, &s, &t, Some(1))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(got.stored_offset, 3);
        }
    }
    // And `Next` for the name continues after it, over HTTP too.
    let polled = http
        .poll_messages(&s, &t, Some(1), &named, &PollingStrategy::next(), 10, false)
        .await
        .unwrap();
    assert_eq!(polled.messages.first().map(|m| m.header.offset), Some(4));
}

/// Keyed partitioning is Iggy's on both transports: XXH32 of the key,
/// modulo the partition count (the SDK computes it over TCP, sluice over
/// HTTP), so the same key lands in the same partition everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_message_key_then_both_transports_pick_iggys_partition() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let tcp = topic_with_messages(&server, 0).await;
    let http = http_login(&server).await;
    let (s, t, _) = ids();
    // "user-123" → 214559884 % 4 = 0; u32 42 → 1161967057 % 4 = 1;
    // u64 7 → 3913589855 % 4 = 3 (docs/research/iggy-0.11-groups-names-keys.md §5).
    let keys = [
        (Partitioning::messages_key_str("user-123").unwrap(), 0),
        (Partitioning::messages_key_u32(42), 1),
        (Partitioning::messages_key_u64(7), 3),
    ];
    for (i, (key, partition)) in keys.iter().enumerate() {
        for client in [&tcp as &dyn Client, &http as &dyn Client] {
            let mut batch = vec![
                IggyMessage::builder()
                    .payload(format!("k{i}").into())
                    .build()
                    .unwrap(),
            ];
            client.send_messages(&s, &t, key, &mut batch).await.unwrap();
        }
        let polled = http
            .poll_messages(
                &s,
                &t,
                Some(*partition),
                &Consumer::new(Identifier::numeric(9).unwrap()),
                &PollingStrategy::offset(0),
                100,
                false,
            )
            .await
            .unwrap();
        let here = polled
            .messages
            .iter()
            .filter(|m| m.payload.as_ref() == format!("k{i}").as_bytes())
            .count();
        assert_eq!(
            here, 2,
            "key {i} did not land in partition {partition} twice"
        );
    }
}

/// Given for the engine-level scenarios: a persisted topic of two
/// partitions, group "workers", and `count` messages in partition 1.
fn group_of_two_partitions(
    engine: &mut sluice_server::Engine,
    count: u64,
) -> sluice_server::Identifier {
    use sluice_testkit::engine as kit;
    kit::setup_partitions(engine, kit::persisted(), 2);
    let (s, t) = (kit::stream(), kit::topic());
    engine.create_group(&s, &t, None, "workers").unwrap();
    engine
        .send(
            &s,
            &t,
            &sluice_server::Partitioning::PartitionId(1),
            kit::batch(0, count),
        )
        .unwrap();
    "workers".into()
}

/// The cooperative handover through the engine, step by step: member A was
/// served offsets 0..=4 of partition 1 and has not committed them when B
/// joins. Returns the first offset B is then served from partition 1, and
/// what A and B could poll right after the join.
fn handover_after_an_uncommitted_poll() -> (Option<u64>, Vec<u32>, Vec<u32>) {
    use sluice_server::MemberPoll;
    use sluice_testkit::engine::{self as kit, Consumer as EngineConsumer};
    let (a, b) = (1, 2);
    let sim = kit::new_sim();
    let mut engine = kit::sim_engine(&sim);
    let g = group_of_two_partitions(&mut engine, 10);
    let (s, t) = (kit::stream(), kit::topic());
    let poll = |engine: &mut sluice_server::Engine, client: u32, partition: u32| {
        engine
            .poll_as_member(
                client,
                &s,
                &t,
                &g,
                Some(partition),
                kit::PollingStrategy::Next,
                5,
                false,
            )
            .unwrap()
    };

    // Given: A alone holds both partitions and is served 0..=4 of partition 1.
    engine.join_group(a, &s, &t, &g).unwrap();
    let MemberPoll::Served(first) = poll(&mut engine, a, 1) else {
        panic!("A may poll partition 1");
    };
    assert_eq!(kit::offsets_of(&first.messages), [0, 1, 2, 3, 4]);

    // When: B joins before A commits,
    engine.join_group(b, &s, &t, &g).unwrap();
    let pollable = |engine: &mut sluice_server::Engine, client| {
        engine
            .sync_group(client, &s, &t, &g)
            .unwrap()
            .map(|(_, partitions)| partitions)
            .unwrap_or_default()
    };
    let (a_may, b_may) = (pollable(&mut engine, a), pollable(&mut engine, b));

    // and A then commits what it was served (it still may: it holds the
    // partition until the handover),
    // (Without the revocation A no longer holds it, and its commit is
    // refused: 5009.)
    if let Ok(c) = engine.member_consumer(a, &s, &t, &g, 1) {
        assert_eq!(c, EngineConsumer::group(0));
        engine.store_offset(&s, &t, 1, c, 4).unwrap();
        engine.after_member_commit(&s, &t, &g);
    }

    // then B is served partition 1 from where A's commit left it.
    let served = match poll(&mut engine, b, 1) {
        MemberPoll::Served(p) => p.messages.first().map(|m| m.offset),
        other => panic!("B may not poll partition 1 after A's commit: {other:?}"),
    };
    (served, a_may, b_may)
}

#[test]
fn given_a_member_served_and_not_committed_when_another_joins_then_nothing_is_delivered_twice() {
    let (served, a_may, b_may) = handover_after_an_uncommitted_poll();
    // A keeps polling partition 0 only; B polls nothing until A committed.
    assert_eq!((a_may, b_may), (vec![0], vec![]));
    assert_eq!(served, Some(5));
}

/// Teeth: without the revocation (`RevokeInFlightPartitions`), partition 1
/// moves to B at once and B is served A's uncommitted messages again.
#[test]
fn without_revoking_in_flight_partitions_a_join_delivers_messages_twice() {
    let off =
        sluice_server::teeth::disable(sluice_server::teeth::Mechanism::RevokeInFlightPartitions);
    let (served, _, b_may) = handover_after_an_uncommitted_poll();
    drop(off);
    assert_eq!(b_may, vec![1]);
    assert_eq!(served, Some(0), "B is served offset 0 again");
}

/// The purge regression once through a group consumer (issue 28): a member
/// polling with `Next` and auto-commit through a topic purge gets the
/// complete fresh history, from offset 0, and nothing of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_group_polling_through_a_topic_purge_then_it_gets_the_complete_fresh_history() {
    // Given: a member that consumed and committed all of partition 2.
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path()).await;
    let admin = topic_with_messages(&server, 6).await;
    let (s, t, g) = ids();
    admin.create_consumer_group(&s, &t, GROUP).await.unwrap();
    let member = sdk_login(&server).await;
    member.join_consumer_group(&s, &t, &g).await.unwrap();
    let group = Consumer::group(g.clone());
    let next = |n| {
        let (member, s, t, group) = (&member, &s, &t, &group);
        async move {
            member
                .poll_messages(s, t, Some(2), group, &PollingStrategy::next(), n, true)
                .await
                .unwrap()
        }
    };
    assert_eq!(next(100).await.messages.len(), 6);

    // When: the topic is purged and three new messages arrive,
    admin.purge_topic(&s, &t).await.unwrap();
    let mut fresh: Vec<IggyMessage> = (0..3)
        .map(|i| {
            IggyMessage::builder()
                .payload(format!("fresh-{i}").into())
                .build()
                .unwrap()
        })
        .collect();
    admin
        .send_messages(&s, &t, &Partitioning::partition_id(2), &mut fresh)
        .await
        .unwrap();

    // then the member's `Next` starts the new history at offset 0 and gets
    // all of it, one by one, then nothing more.
    let mut got = Vec::new();
    for _ in 0..4 {
        for m in next(1).await.messages {
            got.push((
                m.header.offset,
                String::from_utf8_lossy(&m.payload).to_string(),
            ));
        }
    }
    assert_eq!(
        got,
        [
            (0, "fresh-0".into()),
            (1, "fresh-1".into()),
            (2, "fresh-2".into())
        ]
    );
}

/// A group's auto-commit never moves its offset back (Iggy's rule): a
/// member polling from an earlier offset commits nothing.
#[test]
fn given_a_group_offset_when_a_member_polls_from_earlier_with_auto_commit_then_it_stays() {
    use sluice_server::MemberPoll;
    use sluice_testkit::engine::{self as kit, PollingStrategy as Strategy};
    let sim = kit::new_sim();
    let mut engine = kit::sim_engine(&sim);
    kit::setup(&mut engine, kit::persisted());
    kit::send(&mut engine, 0, 10);
    let (s, t) = (kit::stream(), kit::topic());
    engine.create_group(&s, &t, None, "workers").unwrap();
    let g: sluice_server::Identifier = "workers".into();
    engine.join_group(1, &s, &t, &g).unwrap();
    let mut poll = |strategy| match engine
        .poll_as_member(1, &s, &t, &g, Some(0), strategy, 5, true)
        .unwrap()
    {
        MemberPoll::Served(p) => kit::offsets_of(&p.messages),
        other => panic!("{other:?}"),
    };
    // Given: the group committed 9 (auto-commit of a poll of 6..=9),
    assert_eq!(poll(Strategy::Offset(6)), [6, 7, 8, 9]);
    // when a member polls from 0 with auto-commit,
    assert_eq!(poll(Strategy::Offset(0)), [0, 1, 2, 3, 4]);
    // then the offset stayed at 9: `Next` has nothing after it (an offset
    // moved back to 4 would serve 5..=9 again).
    assert_eq!(poll(Strategy::Next), Vec::<u64>::new());
}

/// A handover whose holder never commits completes at its deadline even
/// while neither member touches the group: the reconciler's pass completes
/// it, and the group's details show the new holder.
#[test]
fn given_a_revocation_nobody_commits_when_its_deadline_passes_then_a_reconciler_pass_completes_it()
{
    use sluice_server::MemberPoll;
    use sluice_testkit::engine::{self as kit, ManualClock, PollingStrategy as Strategy};
    use std::sync::Arc;
    let sim = kit::new_sim();
    let clock = Arc::new(ManualClock::new(kit::START_MICROS));
    let (mut engine, _) = kit::open_sim_with_clock(&sim, clock.clone());
    let g = group_of_two_partitions(&mut engine, 3);
    let (s, t) = (kit::stream(), kit::topic());
    // Given: A was served partition 1 and never commits; B joined.
    engine.join_group(1, &s, &t, &g).unwrap();
    let served = engine
        .poll_as_member(1, &s, &t, &g, Some(1), Strategy::Next, 3, false)
        .unwrap();
    assert!(matches!(served, MemberPoll::Served(p) if p.messages.len() == 3));
    engine.join_group(2, &s, &t, &g).unwrap();
    let holders = |e: &sluice_server::Engine| e.group_members(0, 0, 0);
    assert_eq!(holders(&engine), [(0, vec![0, 1]), (1, vec![])]);

    // When: the deadline passes and the reconciler runs, nobody syncing,
    clock.advance(sluice_server::membership::REVOCATION_TIMEOUT_US);
    engine.reconcile();

    // then B holds partition 1.
    assert_eq!(holders(&engine), [(0, vec![0]), (1, vec![1])]);
}
