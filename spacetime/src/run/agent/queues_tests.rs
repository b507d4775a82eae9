use super::*;

/// Queues with small bounds, in KiB: a client's, a user's, the agent's.
fn small(client: usize, user: usize, agent: usize) -> Queues {
    let q = Queues::default();
    q.0.borrow_mut().limits = Limits {
        client: client << 10,
        user: user << 10,
        agent: agent << 10,
    };
    q
}

/// A message of records costing 1 KiB queued.
fn records() -> Vec<u8> {
    vec![1u8; 1024 - MESSAGE_OVERHEAD]
}

/// Pushes records on `id` until one is dropped; how many went in.
fn fill(q: &Queues, id: QueueId) -> usize {
    let mut n = 0;
    while q.push(id, records(), Kind::Records(1)) {
        n += 1;
        assert!(n < 1000, "never full");
    }
    n
}

/// Two clients of one user share its bound: the second gets only what the first left.
#[test]
fn a_users_clients_share_its_bound() {
    let q = small(4, 8, 32);
    let (a, b) = (q.open(7, true), q.open(7, true));
    assert_eq!(fill(&q, a), 4, "a client's bound");
    assert_eq!(fill(&q, b), 4, "the user's bound less the first's");
    let c = q.open(7, true);
    assert_eq!(fill(&q, c), 0, "nothing left for a third");
    assert_eq!(q.of_user(7), 8 << 10);
    assert_eq!(q.take_loss(c).records, 1);
}

/// Four users who never read fill the agent's bound (8 KiB each, 32 in all); a fifth user
/// finds room all the same: the records of the users who hold the most go, and each loss is
/// counted as its own client's. The slow users then lose their own records, not each
/// other's (none holds more than the one asking), and answers are never dropped.
#[test]
fn a_slow_users_records_go_before_anyone_elses() {
    let q = small(8, 8, 32);
    let slow: Vec<Vec<QueueId>> = (1..=4)
        .map(|u| vec![q.open(u, true), q.open(u, true)])
        .collect();
    for ids in &slow {
        for &id in ids {
            fill(&q, id);
        }
    }
    assert_eq!(q.total(), 32 << 10, "the agent's bound is reached");
    let prompt = q.open(5, true);
    for _ in 0..6 {
        assert!(
            q.push(prompt, records(), Kind::Records(1)),
            "room for the fifth"
        );
    }
    assert_eq!(q.loss(prompt), Loss::default());
    assert_eq!(q.total(), 32 << 10, "the bound holds");
    let evicted: u64 = slow.iter().flatten().map(|&id| q.loss(id).records).sum();
    let refused = 8;
    assert_eq!(
        evicted,
        6 + refused,
        "each eviction counted as its client's loss"
    );
    // Max-min: the fifth now holds 6 KiB, the slow users 6 or 7, none more than the fifth
    // would with one more: now the fifth's own record goes.
    assert!(!q.push(prompt, records(), Kind::Records(1)));
    let held: Vec<usize> = (1..=5).map(|u| q.of_user(u)).collect();
    assert_eq!(held[4], 6 << 10);
    assert!(
        held.iter().all(|&h| h <= 7 << 10),
        "no user holds more than the fifth plus a message: {held:?}"
    );
    assert_eq!(q.loss(prompt).records, 1, "then its own records go");
    // A slow user asking finds no user holding more than itself: its own record goes.
    let before: Vec<Loss> = slow.iter().flatten().map(|&id| q.loss(id)).collect();
    assert!(!q.push(slow[0][0], records(), Kind::Records(1)));
    let after: Vec<Loss> = slow.iter().flatten().map(|&id| q.loss(id)).collect();
    assert_eq!(after[0].records, before[0].records + 1);
    assert_eq!(after[1..], before[1..], "no one else's");
    // Answers always go in, and are never dropped to make room.
    assert!(q.push(slow[1][0], vec![0; 100], Kind::Answer));
    let prompt2 = q.open(6, true);
    while q.push(prompt2, records(), Kind::Records(1)) {}
    assert!(
        q.0.borrow().boxes[&slow[1][0].0]
            .msgs
            .iter()
            .any(|m| m.kind == Kind::Answer),
        "the answer stays"
    );
}

/// Closing a queue gives its bytes back to its user and the agent.
#[test]
fn a_closed_queue_gives_its_bytes_back() {
    let q = small(4, 8, 32);
    let (a, b) = (q.open(1, true), q.open(0, false));
    fill(&q, a);
    fill(&q, b);
    assert_eq!(q.total(), 8 << 10);
    assert_eq!(q.close(a), 4 << 10);
    assert_eq!((q.of_user(1), q.total()), (0, 4 << 10));
    q.close(b);
    assert_eq!(q.total(), 0);
}

/// A queue's front goes in one call, each message its own packet in order, up to the batch;
/// the answers among them are counted, and what went gives its bytes back.
#[test]
fn the_front_goes_in_one_call_as_separate_messages() {
    use std::os::fd::AsFd;
    let (ours, theirs) = sock::pair().expect("a socket pair");
    let q = small(64, 64, 64);
    let id = q.open(7, true);
    let total = sock::SEND_BATCH + 2;
    for i in 0..total {
        let kind = match i % 3 {
            0 => Kind::Answer,
            _ => Kind::Records(1),
        };
        assert!(
            q.push(id, vec![i as u8; 10 + i], kind),
            "message {i} queued"
        );
    }
    let first = q.send_front(id, ours.as_fd()).expect("sent");
    let answers = (0..sock::SEND_BATCH).filter(|i| i % 3 == 0).count();
    assert_eq!((first.messages, first.answers), (sock::SEND_BATCH, answers));
    let rest = q.send_front(id, ours.as_fd()).expect("sent");
    assert_eq!(rest.messages, 2, "the rest in the next call");
    assert_eq!(q.send_front(id, ours.as_fd()).expect("none").messages, 0);
    assert_eq!(q.of_user(7), 0, "every byte given back");
    let mut buf = vec![0u8; 256];
    for i in 0..total {
        let n = rustix::net::recv(&theirs, &mut buf, rustix::net::RecvFlags::DONTWAIT)
            .expect("a message")
            .0;
        assert_eq!(
            &buf[..n],
            vec![i as u8; 10 + i],
            "message {i} whole, in order"
        );
    }
}
