//! Cases of workspace checkpoints: the latest per task, byte-exact, fenced by the lease, capped.

use super::*;
use orchestrator_store::{CheckpointSave, NewCheckpoint, NewMessage, patch_sha256};
use orchestrator_types::ChatMessage;

const TREE: &str = "89abcdef0123456789abcdef0123456789abcdef";

/// A checkpoint of `TREE`, following the task's last one (of the same tree).
fn checkpoint<'a>(patch: &'a [u8], turn: i64) -> NewCheckpoint<'a> {
    NewCheckpoint {
        base: "0123456789abcdef0123456789abcdef01234567",
        turn,
        tree: TREE,
        files: 2,
        patch,
        attempt: 1,
        worker: "host-a",
        follows: Some(TREE),
    }
}

fn saved(result: CheckpointSave) -> orchestrator_store::Checkpoint {
    match result {
        CheckpointSave::Saved(c) => c,
        other => panic!("not saved: {other:?}"),
    }
}

pub async fn a_checkpoint_is_the_latest_per_task_byte_exact_and_fenced(db: &TestStore) {
    let store = db.store.clone();
    let mut new = NewTask::agent("edit", "do it");
    new.workspace = Some("/tmp".into());
    let id = store.create_task(&new).await.unwrap();
    let other = store.create_task(&new).await.unwrap();
    let (_, lease) = store
        .claim_task("host-a", id, LEASE)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.latest_checkpoint(id).await.unwrap(), None);
    store
        .append_messages(
            &lease,
            1,
            &[NewMessage {
                turn: 0,
                message: ChatMessage::user("do it"),
                usage: None,
                model_ms: None,
            }],
            (EventKind::Message, json!({"role": "user"})),
        )
        .await
        .unwrap();
    let last_seq = store.messages(id).await.unwrap().last().unwrap().seq;

    // Non-UTF-8 bytes, CRLF, a NUL and no final newline survive as they are.
    let first: Vec<u8> = b"diff --git a/x b/x\r\n+\xff\xfe\x00 new\x80".to_vec();
    let one = saved(
        store
            .save_checkpoint(
                &lease,
                &NewCheckpoint {
                    follows: None,
                    ..checkpoint(&first, 3)
                },
                1 << 20,
            )
            .await
            .unwrap(),
    );
    assert_eq!(one.turn, 3);
    assert_eq!(one.after_seq, last_seq);
    assert_eq!(one.patch_bytes, first.len() as i64);
    assert_eq!(one.patch_sha256, patch_sha256(&first));
    assert_eq!(one.worker, "host-a");
    let (read, bytes) = store.latest_checkpoint(id).await.unwrap().unwrap();
    assert_eq!(read, one);
    assert!(
        bytes == first,
        "the patch changed on its way through the store"
    );

    // A second save replaces the first: one row per task, the newest.
    let big: Vec<u8> = (0..512 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let two = saved(
        store
            .save_checkpoint(&lease, &checkpoint(&big, 4), 1 << 20)
            .await
            .unwrap(),
    );
    let (read, bytes) = store.latest_checkpoint(id).await.unwrap().unwrap();
    assert_eq!((read.turn, read.patch_bytes), (4, big.len() as i64));
    assert_eq!(read, two);
    assert!(bytes == big);
    assert_eq!(store.latest_checkpoint(other).await.unwrap(), None);

    // The events carry the turn and the size, never the bytes.
    let events = store
        .events_of_kind(id, EventKind::CheckpointSaved)
        .await
        .unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1].data["turn"], 4);
    assert_eq!(events[1].data["bytes"], big.len() as i64);
    assert!(
        events[1].data.to_string().len() < 1000,
        "{}",
        events[1].data
    );

    // A save that follows another checkpoint than the task's own (its workspace does not descend
    // from the newest one), or none when there is one, replaces nothing and says which is newer.
    for follows in [Some("ffffffffffffffffffffffffffffffffffffffff"), None] {
        let stale_tree = store
            .save_checkpoint(
                &lease,
                &NewCheckpoint {
                    follows,
                    tree: "0000000000000000000000000000000000000000",
                    ..checkpoint(b"an old workspace", 7)
                },
                1 << 20,
            )
            .await
            .unwrap();
        assert_eq!(
            stale_tree,
            CheckpointSave::Superseded {
                tree: Some(TREE.to_owned())
            }
        );
    }
    assert_eq!(store.latest_checkpoint(id).await.unwrap().unwrap().0, two);
    assert_eq!(
        store
            .events_of_kind(id, EventKind::CheckpointSaved)
            .await
            .unwrap()
            .len(),
        2,
        "a superseded save writes no event"
    );

    // Over the cap: not saved, an event says the task cannot move, the last checkpoint stays.
    let refused = store
        .save_checkpoint(&lease, &checkpoint(&big, 5), 1024)
        .await
        .unwrap();
    assert_eq!(
        refused,
        CheckpointSave::TooLarge {
            bytes: big.len() as u64,
            cap: 1024
        }
    );
    let not_saved = store
        .events_of_kind(id, EventKind::CheckpointNotSaved)
        .await
        .unwrap();
    assert_eq!(not_saved.len(), 1);
    assert_eq!(not_saved[0].data["turn"], 5);
    assert_eq!(store.latest_checkpoint(id).await.unwrap().unwrap().0, two);

    // A lease that is no longer current writes nothing: neither row nor event.
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    let events_before = kinds(&store, id).await;
    let stale = store
        .save_checkpoint(&lease, &checkpoint(b"late", 9), 1 << 20)
        .await;
    assert!(matches!(stale, Err(Error::StaleLease { .. })), "{stale:?}");
    let stale = store
        .save_checkpoint(&lease, &checkpoint(&big, 9), 16)
        .await;
    assert!(matches!(stale, Err(Error::StaleLease { .. })), "{stale:?}");
    assert_eq!(kinds(&store, id).await, events_before);
    assert_eq!(store.latest_checkpoint(id).await.unwrap().unwrap().0, two);

    // The next attempt's lease saves again.
    let (_, next) = store
        .claim_task("host-b", id, LEASE)
        .await
        .unwrap()
        .unwrap();
    let three = saved(
        store
            .save_checkpoint(
                &next,
                &NewCheckpoint {
                    attempt: 2,
                    worker: "host-b",
                    ..checkpoint(b"third", 6)
                },
                1 << 20,
            )
            .await
            .unwrap(),
    );
    assert_eq!((three.attempt, three.worker.as_str()), (2, "host-b"));
    assert_eq!(store.checkpoint_info(id).await.unwrap(), Some(three));
}
