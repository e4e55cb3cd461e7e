//! Cases of the requests that wait on a person: an approval pauses its task and a decision resumes
//! it (also when the decision lands before the pause), approvals expire and close with their task
//! on every path it ends by, and questions take text answers.

use super::agent::{agent_task, ask, claim_one};
use super::*;
use orchestrator_store::{
    ApprovalDecision, ApprovalFilter, NewApproval, approval_kind, approval_status,
};

pub async fn approval_pauses_and_a_decision_resumes(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("a")).await.unwrap();
    let (task, lease) = claim_one(&store).await;
    assert_eq!(task.attempt, 1);
    let approval = store
        .request_approval(&lease, &ask("c1", now_millis() + 60_000))
        .await
        .unwrap();
    assert_eq!(approval.status, approval_status::PENDING);
    // Asking again for the same call finds the same approval.
    let again = store
        .request_approval(&lease, &ask("c1", now_millis() + 60_000))
        .await
        .unwrap();
    assert_eq!(again.id, approval.id);
    let results = store
        .complete(&[Completion {
            lease: lease.clone(),
            outcome: Outcome::Wait {
                reason: "approval".into(),
            },
            details: json!({"approval": approval.id}),
        }])
        .await
        .unwrap();
    assert_eq!(results, [CompletionResult::Applied]);
    let task = store.get_task(id).await.unwrap();
    assert_eq!(task.state, TaskState::Waiting);
    assert_eq!(task.attempt, 0, "waiting does not spend the attempt");
    assert!(
        store
            .claim("w", &queues(), 1, LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    let pending = store
        .list_approvals(&ApprovalFilter {
            status: Some(approval_status::PENDING.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].arguments["command"], "rm -rf build");

    // Answering a tool approval with text is refused; approving works once.
    assert!(matches!(
        store
            .decide_approval(approval.id, &ApprovalDecision::Answer("yes".into()), "ann")
            .await,
        Err(Error::InvalidAnswer(_))
    ));
    let decided = store
        .decide_approval(approval.id, &ApprovalDecision::Approve, "ann")
        .await
        .unwrap();
    assert_eq!(decided.status, approval_status::APPROVED);
    assert_eq!(decided.decided_by.as_deref(), Some("ann"));
    assert!(matches!(
        store
            .decide_approval(approval.id, &ApprovalDecision::Approve, "bob")
            .await,
        Err(Error::ApprovalDecided { .. })
    ));
    assert_eq!(store.get_task(id).await.unwrap().state, TaskState::Queued);
    let (again, _) = claim_one(&store).await;
    assert_eq!(again.id, id);
    assert_eq!(again.attempt, 1);
    assert_eq!(
        store
            .approval_for_call(id, "c1")
            .await
            .unwrap()
            .unwrap()
            .status,
        approval_status::APPROVED
    );
}

pub async fn decision_before_the_pause_lands_still_resumes(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("race")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let approval = store
        .request_approval(&lease, &ask("c1", now_millis() + 60_000))
        .await
        .unwrap();
    // The person answers before the worker's Wait completion is written.
    store
        .decide_approval(
            approval.id,
            &ApprovalDecision::Deny {
                reason: Some("not today".into()),
            },
            "ann",
        )
        .await
        .unwrap();
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Wait {
                reason: "approval".into(),
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.get_task(id).await.unwrap().state,
        TaskState::Queued,
        "an answer that raced the pause must not leave the task waiting forever"
    );
}

pub async fn approvals_expire_and_close_with_their_task(db: &TestStore) {
    let store = db.store.clone();
    let id = store.create_task(&agent_task("expire")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let approval = store
        .request_approval(&lease, &ask("c1", now_millis() - 1))
        .await
        .unwrap();
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Wait {
                reason: "approval".into(),
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(store.expire_approvals(now_millis(), 100).await.unwrap(), 1);
    assert_eq!(store.expire_approvals(now_millis(), 100).await.unwrap(), 0);
    let expired = store.get_approval(approval.id).await.unwrap();
    assert_eq!(expired.status, approval_status::EXPIRED);
    assert_eq!(store.get_task(id).await.unwrap().state, TaskState::Queued);

    // A waiting task that is canceled closes its pending approvals.
    let other = store.create_task(&agent_task("cancel")).await.unwrap();
    let mut claimed = store.claim("w", &queues(), 2, LEASE).await.unwrap();
    let (_, lease) = claimed.drain(..).find(|(t, _)| t.id == other).unwrap();
    let pending = store
        .request_approval(&lease, &ask("c9", now_millis() + 60_000))
        .await
        .unwrap();
    store
        .complete(&[Completion {
            lease,
            outcome: Outcome::Wait {
                reason: "approval".into(),
            },
            details: json!({}),
        }])
        .await
        .unwrap();
    assert_eq!(
        store.cancel_task(other).await.unwrap(),
        CancelOutcome::Canceled
    );
    assert_eq!(
        store.get_approval(pending.id).await.unwrap().status,
        approval_status::CANCELED
    );
    assert!(matches!(
        store
            .decide_approval(pending.id, &ApprovalDecision::Approve, "ann")
            .await,
        Err(Error::ApprovalDecided { .. })
    ));
}

pub async fn questions_take_text_answers(db: &TestStore) {
    let store = db.store.clone();
    store.create_task(&agent_task("q")).await.unwrap();
    let (_, lease) = claim_one(&store).await;
    let question = store
        .request_approval(
            &lease,
            &NewApproval {
                call_id: "q1".into(),
                kind: approval_kind::QUESTION,
                tool: "ask_user".into(),
                arguments: json!({"question": "Which database?"}),
                reason: "Which database?".into(),
                options: Some(vec!["sqlite".into(), "postgres".into()]),
                expires_at: now_millis() + 60_000,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        question.options.as_deref(),
        Some(&["sqlite".to_owned(), "postgres".to_owned()][..])
    );
    assert!(matches!(
        store
            .decide_approval(question.id, &ApprovalDecision::Approve, "ann")
            .await,
        Err(Error::InvalidAnswer(_))
    ));
    assert!(matches!(
        store
            .decide_approval(question.id, &ApprovalDecision::Answer("  ".into()), "ann")
            .await,
        Err(Error::InvalidAnswer(_))
    ));
    let answered = store
        .decide_approval(
            question.id,
            &ApprovalDecision::Answer("postgres".into()),
            "ann",
        )
        .await
        .unwrap();
    assert_eq!(answered.status, approval_status::ANSWERED);
    assert_eq!(answered.answer.as_deref(), Some("postgres"));
}

/// A task that ends while one of its approvals is pending (its attempt failed or succeeded, or the
/// rescuer gave up on it) closes the approval in the same transaction: approving it later is
/// refused instead of reporting a success that does nothing.
pub async fn approvals_close_when_their_task_ends_on_every_path(db: &TestStore) {
    let store = db.store.clone();
    let outcomes = [
        Outcome::Failed {
            error: "gave up".into(),
        },
        Outcome::Succeeded,
        Outcome::Canceled,
    ];
    for outcome in outcomes {
        let id = store.create_task(&agent_task("ends")).await.unwrap();
        let mut claimed = store.claim("w", &queues(), 10, LEASE).await.unwrap();
        let (_, lease) = claimed.drain(..).find(|(t, _)| t.id == id).unwrap();
        let pending = store
            .request_approval(&lease, &ask("c1", now_millis() + 60_000))
            .await
            .unwrap();
        store
            .complete(&[Completion {
                lease,
                outcome: outcome.clone(),
                details: json!({}),
            }])
            .await
            .unwrap();
        assert!(store.get_task(id).await.unwrap().state.is_terminal());
        let closed = store.get_approval(pending.id).await.unwrap();
        assert_eq!(closed.status, approval_status::CANCELED, "{outcome:?}");
        let late = store
            .decide_approval(pending.id, &ApprovalDecision::Approve, "ann")
            .await;
        assert!(late.is_err(), "{outcome:?}: a late approval was taken");
    }
    // The rescuer failing a task whose worker died (no attempts left).
    let mut last = agent_task("rescued");
    last.max_attempts = 1;
    let id = store.create_task(&last).await.unwrap();
    let mut claimed = store.claim("w", &queues(), 10, 1).await.unwrap();
    let (_, lease) = claimed.drain(..).find(|(t, _)| t.id == id).unwrap();
    let pending = store
        .request_approval(&lease, &ask("c2", now_millis() + 60_000))
        .await
        .unwrap();
    store
        .rescue_expired(now_millis() + 10 * LEASE, 100, |_| 0)
        .await
        .unwrap();
    assert_eq!(store.get_task(id).await.unwrap().state, TaskState::Failed);
    assert_eq!(
        store.get_approval(pending.id).await.unwrap().status,
        approval_status::CANCELED
    );
}
