//! `application/vnd.herald.batch` (docs/binary-batches.md): a batch produced in the stored
//! layout is stored byte for byte, read back as it is or as JSON, keeps offsets contiguous
//! with JSON produces, and every malformed batch is refused with its code and writes nothing.
//! (Idempotent producers' and compacted batches: `binary_idempotent`.)

use crate::common;

use crate::common::Server;
use bytes::Bytes;
use herald::domain::batch::{
    decode_batch, encode_batch, encode_compacted_batch, ProducerStamp, BATCH_HEADER_LEN,
};
use herald::domain::{Compression, Record, RecordKey, RecordValue};
use reqwest::StatusCode;
use serde_json::{json, Value};

const BATCH: &str = "application/vnd.herald.batch";

fn record(index: u32, timestamp: i64) -> Record {
    Record {
        offset_delta: index,
        timestamp,
        key: Some(RecordKey::Text(format!("key-{index}"))),
        value: RecordValue::Json(Bytes::from(format!(r#"{{"n":{index}}}"#))),
        headers: vec![("trace".into(), format!("t{index}"))],
    }
}

fn records(count: u32, timestamp: i64) -> Vec<Record> {
    (0..count)
        .map(|index| record(index, timestamp + i64::from(index)))
        .collect()
}

fn batch_of(records: &[Record], compression: Compression) -> Bytes {
    encode_batch(records, compression, ProducerStamp::NONE).expect("encode")
}

/// The batch with its CRC recomputed, so a change past the CRC reaches the deeper checks.
fn with_crc(mut batch: Vec<u8>) -> Vec<u8> {
    if batch.len() >= 6 {
        let crc = crc32c::crc32c(&batch[6..]);
        batch[2..6].copy_from_slice(&crc.to_be_bytes());
    }
    batch
}

async fn produce_batch(
    server: &Server,
    topic: &str,
    partition: u32,
    batch: &[u8],
) -> (StatusCode, Value) {
    let response = server
        .post_raw(
            &format!("/v1/topics/{topic}/partitions/{partition}/messages"),
            BATCH,
            batch.to_vec(),
        )
        .await;
    server.json(response).await
}

async fn produce_batch_ok(server: &Server, topic: &str, partition: u32, batch: &[u8]) -> u64 {
    let (status, answer) = produce_batch(server, topic, partition, batch).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["partition"], partition);
    answer["base_offset"].as_u64().expect("a base offset")
}

/// A binary read: the frames (base offset, batch bytes) and the offsets headers.
struct BinaryRead {
    frames: Vec<(u64, Vec<u8>)>,
    next_offset: u64,
    high_watermark: u64,
    log_start_offset: u64,
}

async fn read_binary(server: &Server, topic: &str, partition: u32, query: &str) -> BinaryRead {
    let response = server
        .http_client()
        .get(server.url(&format!(
            "/v1/topics/{topic}/partitions/{partition}/messages?{query}"
        )))
        .header("accept", BATCH)
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], BATCH);
    let header = |name: &str| -> u64 {
        response.headers()[name]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("a number")
    };
    let (next_offset, high_watermark, log_start_offset) = (
        header("herald-next-offset"),
        header("herald-high-watermark"),
        header("herald-log-start-offset"),
    );
    let body = response.bytes().await.expect("body");
    let mut frames = Vec::new();
    let mut rest = &body[..];
    while !rest.is_empty() {
        let base_offset = u64::from_be_bytes(rest[..8].try_into().expect("8 bytes"));
        let records_len =
            u32::from_be_bytes(rest[8 + 45..8 + 49].try_into().expect("4 bytes")) as usize;
        let end = 8 + BATCH_HEADER_LEN + records_len;
        frames.push((base_offset, rest[8..end].to_vec()));
        rest = &rest[end..];
    }
    BinaryRead {
        frames,
        next_offset,
        high_watermark,
        log_start_offset,
    }
}

#[tokio::test]
async fn a_batch_is_stored_byte_for_byte_and_reads_back_as_json_and_as_sent() {
    let server = Server::start().await;
    server.create_topic("bin", 2).await;
    let now = common::now_ms();
    for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
        let sent = records(50, now);
        let batch = batch_of(&sent, compression);
        let base = produce_batch_ok(&server, "bin", 1, &batch).await;

        // The stored batch is the client's bytes, not a re-encoding of its records.
        let read = read_binary(&server, "bin", 1, &format!("offset={base}")).await;
        assert_eq!(read.frames.len(), 1);
        assert_eq!(read.frames[0].0, base);
        assert_eq!(read.frames[0].1, batch.to_vec(), "{compression:?}");
        assert_eq!(read.next_offset, base + 50);
        assert_eq!(read.high_watermark, base + 50);
        assert_eq!(read.log_start_offset, 0);

        // And JSON readers see the records as if they had been produced as JSON.
        let (status, answer) = server
            .fetch("bin", 1, &format!("offset={base}&max_messages=1000"))
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let messages = answer["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 50);
        for (index, message) in messages.iter().enumerate() {
            assert_eq!(message["offset"], base + index as u64);
            assert_eq!(message["partition"], 1);
            assert_eq!(message["key"], format!("key-{index}"));
            assert_eq!(message["value"], json!({"n": index}));
            assert_eq!(message["headers"], json!({"trace": format!("t{index}")}));
            assert_eq!(message["timestamp"], now + index as i64);
        }
    }
    // Nothing went to the other partition.
    assert_eq!(server.high_watermarks("bin").await, vec![0, 150]);
}

#[tokio::test]
async fn json_and_binary_produces_interleave_with_contiguous_offsets() {
    let server = Server::start().await;
    server.create_topic("mixed", 1).await;
    let now = common::now_ms();
    let json_body = |count: usize, tag: &str| {
        json!({"messages": (0..count)
            .map(|index| json!({"value": format!("{tag}-{index}")}))
            .collect::<Vec<_>>()})
    };

    // In sequence: each request's offsets start where the previous one's ended.
    let mut expected_next = 0u64;
    for round in 0..3u32 {
        let offsets = server
            .produce_ok("mixed", &json_body(3, &format!("json{round}")))
            .await;
        assert_eq!(
            offsets,
            (0..3).map(|i| (0, expected_next + i)).collect::<Vec<_>>()
        );
        expected_next += 3;
        let compression = [Compression::None, Compression::Lz4, Compression::Zstd][round as usize];
        let base = produce_batch_ok(
            &server,
            "mixed",
            0,
            &batch_of(&records(5, now), compression),
        )
        .await;
        assert_eq!(base, expected_next);
        expected_next += 5;
    }

    // Concurrently: every request gets a contiguous range, and the ranges tile the log.
    let mut tasks = Vec::new();
    for task in 0..16u32 {
        let client = server.http_client().clone();
        let base_url = server.base_url();
        let batch = batch_of(&records(7, now), Compression::None);
        tasks.push(tokio::spawn(async move {
            let response = if task % 2 == 0 {
                client
                    .post(format!("{base_url}/v1/topics/mixed/partitions/0/messages"))
                    .header("content-type", BATCH)
                    .body(batch)
            } else {
                client
                    .post(format!("{base_url}/v1/topics/mixed/messages"))
                    .json(&json!({"messages": (0..7).map(|i| json!({"value": i})).collect::<Vec<_>>()}))
            }
            .send()
            .await
            .expect("POST");
            assert_eq!(response.status(), StatusCode::OK);
            let answer: Value = response.json().await.expect("JSON");
            match answer["base_offset"].as_u64() {
                Some(base) => (base..base + 7).collect::<Vec<_>>(),
                None => common::parse_offsets(&answer)
                    .into_iter()
                    .map(|(_, offset)| offset)
                    .collect(),
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let offsets = task.await.expect("task");
        assert!(
            offsets.windows(2).all(|pair| pair[1] == pair[0] + 1),
            "{offsets:?}"
        );
        all.extend(offsets);
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (expected_next..expected_next + 16 * 7).collect::<Vec<_>>()
    );

    let messages = server.read_all("mixed", 0).await;
    assert_eq!(messages.len() as u64, expected_next + 16 * 7);
    for (index, message) in messages.iter().enumerate() {
        assert_eq!(message.offset, index as u64);
    }

    // Both kinds count in the partition's series (docs/operations.md): binary batches once
    // counted in a series without the partition label.
    assert_eq!(
        server
            .metric(
                "herald_produced_messages_total",
                &[("topic", "mixed"), ("partition", "0")]
            )
            .await,
        Some((expected_next + 16 * 7) as f64)
    );
}

/// Each malformed batch with the code it must get; `valid` is a good batch to spoil.
fn malformed(valid: &[u8], now: i64) -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let mut cases: Vec<(&'static str, Vec<u8>, &'static str)> = Vec::new();
    let mut spoil =
        |what: &'static str, code: &'static str, crc: bool, change: &dyn Fn(&mut Vec<u8>)| {
            let mut batch = valid.to_vec();
            change(&mut batch);
            cases.push((what, if crc { with_crc(batch) } else { batch }, code));
        };
    spoil("empty body", "invalid_batch", false, &|b| b.clear());
    spoil("header cut short", "invalid_batch", false, &|b| {
        b.truncate(40)
    });
    spoil("records cut short", "invalid_batch", false, &|b| {
        b.pop();
    });
    spoil("bytes after the batch", "invalid_batch", false, &|b| {
        b.push(0)
    });
    spoil("bad magic", "invalid_batch", false, &|b| b[0] = b'X');
    spoil("version 2", "unsupported_batch_version", false, &|b| {
        b[1] = 2
    });
    spoil("a flipped record bit", "batch_crc_mismatch", false, &|b| {
        let last = b.len() - 3;
        b[last] ^= 0x10;
    });
    spoil("a wrong CRC", "batch_crc_mismatch", false, &|b| b[2] ^= 1);
    spoil("reserved attribute bits", "invalid_batch", true, &|b| {
        b[6] |= 0x40
    });
    spoil("unknown codec", "invalid_batch", true, &|b| b[6] = 5);
    spoil(
        "a compacted batch spanning more than 100000 offsets",
        "invalid_batch",
        true,
        &|b| {
            b[6] |= 0x08;
            b[11..15].copy_from_slice(&100_001u32.to_be_bytes());
        },
    );
    spoil("record count too high", "invalid_batch", true, &|b| {
        b[10] += 1
    });
    spoil("record count zero", "invalid_batch", true, &|b| {
        b[7..11].copy_from_slice(&[0; 4])
    });
    spoil("offset span off", "invalid_batch", true, &|b| b[14] += 1);
    spoil("first timestamp off", "invalid_batch", true, &|b| {
        b[22] ^= 1
    });
    spoil("max timestamp off", "invalid_batch", true, &|b| b[30] ^= 1);
    spoil("producer id set", "invalid_batch", true, &|b| {
        b[31..39].copy_from_slice(&7i64.to_be_bytes())
    });
    spoil("records_len too long", "invalid_batch", true, &|b| {
        b[48] += 1
    });
    spoil("uncompressed_len differs", "invalid_batch", true, &|b| {
        b[52] += 1
    });
    spoil("reserved record bits", "invalid_batch", true, &|b| {
        b[BATCH_HEADER_LEN] |= 0x80
    });
    spoil(
        "a record length past the section",
        "invalid_batch",
        true,
        &|b| {
            // Record 0: attributes, delta, time delta, then the key's length.
            b[BATCH_HEADER_LEN + 3] = 0x7f;
        },
    );

    let encode = |records: &[Record]| batch_of(records, Compression::None).to_vec();
    let mut gap = records(3, now);
    gap[2].offset_delta = 5;
    cases.push(("offset deltas with a gap", encode(&gap), "invalid_batch"));
    let mut starts_late = records(3, now);
    for record in &mut starts_late {
        record.offset_delta += 1;
    }
    cases.push((
        "offset deltas not from 0",
        encode(&starts_late),
        "invalid_batch",
    ));
    cases.push((
        "negative timestamp",
        encode(&records(2, -10)),
        "invalid_batch",
    ));
    let mut many_headers = records(1, now);
    many_headers[0].headers = vec![("h".into(), "v".into()); 1001];
    cases.push(("1001 headers", encode(&many_headers), "invalid_batch"));
    let mut bad_time = records(1, now);
    bad_time[0].headers = vec![("herald-deliver-at".into(), "soon".into())];
    cases.push((
        "a bad herald-deliver-at",
        encode(&bad_time),
        "invalid_batch",
    ));
    let mut non_utf8_key = encode(&records(1, now));
    // The text key "key-0" starts after attributes, delta, time delta and its length.
    non_utf8_key[BATCH_HEADER_LEN + 4] = 0xff;
    cases.push((
        "a text key not UTF-8",
        with_crc(non_utf8_key),
        "invalid_batch",
    ));
    let half_stamped = encode_batch(
        &records(2, now),
        Compression::None,
        ProducerStamp {
            producer_id: 3,
            producer_epoch: -2,
            base_sequence: 0,
        },
    )
    .expect("encode");
    cases.push((
        "a producer stamp with a negative epoch",
        half_stamped.to_vec(),
        "invalid_batch",
    ));
    let empty = encode_compacted_batch(&[], Compression::None, ProducerStamp::NONE, 2, now)
        .expect("encode");
    cases.push(("an empty compacted batch", empty.to_vec(), "invalid_batch"));
    cases
}

#[tokio::test]
async fn every_malformed_batch_is_refused_with_its_code_and_writes_nothing() {
    let server = Server::start().await;
    server.create_topic("strict", 1).await;
    server
        .create_topic_with(
            &json!({"name": "keyed", "partitions": 1, "config": {"cleanup_policy": "compact"}}),
        )
        .await;
    server
        .create_topic_with(
            &json!({"name": "small", "partitions": 1, "config": {"max_message_bytes": 100}}),
        )
        .await;
    let now = common::now_ms();
    let valid = batch_of(&records(3, now), Compression::None);

    for (what, batch, code) in malformed(&valid, now) {
        let (status, answer) = produce_batch(&server, "strict", 0, &batch).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        assert_eq!(answer["code"], code, "{what}: {answer}");
    }
    assert_eq!(
        server.high_watermarks("strict").await,
        vec![0],
        "nothing was written"
    );

    // The topic's own rules.
    let mut keyless = records(2, now);
    keyless[1].key = None;
    let (status, answer) =
        produce_batch(&server, "keyed", 0, &batch_of(&keyless, Compression::None)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["code"], "invalid_batch");
    let mut large = records(2, now);
    large[1].value = RecordValue::Bytes(Bytes::from(vec![7u8; 200]));
    let (status, answer) =
        produce_batch(&server, "small", 0, &batch_of(&large, Compression::Lz4)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{answer}");
    assert_eq!(answer["code"], "message_too_large");
    assert_eq!(server.high_watermarks("keyed").await, vec![0]);
    assert_eq!(server.high_watermarks("small").await, vec![0]);

    // Where and how it is sent.
    let (status, answer) = produce_batch(&server, "strict", 1, &valid).await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::NOT_FOUND, &json!("partition_not_found"))
    );
    let (status, answer) = produce_batch(&server, "absent", 0, &valid).await;
    assert_eq!(
        (status, &answer["code"]),
        (StatusCode::NOT_FOUND, &json!("topic_not_found"))
    );
    for content_type in ["application/octet-stream", "application/json"] {
        let response = server
            .post_raw(
                "/v1/topics/strict/partitions/0/messages",
                content_type,
                valid.to_vec(),
            )
            .await;
        server
            .expect_problem(
                response,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
            )
            .await;
    }
    assert_eq!(server.high_watermarks("strict").await, vec![0]);

    // The valid batch itself is taken, and the log goes on from 0.
    assert_eq!(produce_batch_ok(&server, "strict", 0, &valid).await, 0);
}

/// Random damage (flipped bytes, cut or grown bodies, with and without a repaired CRC) is
/// always a clean 4xx, never a 5xx, and never writes a byte.
#[tokio::test]
async fn random_damage_is_always_a_clean_refusal() {
    let server = Server::start().await;
    server.create_topic("fuzz", 1).await;
    let now = common::now_ms();
    let valid = batch_of(&records(4, now), Compression::None);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut accepted = 0u64;
    for round in 0..300 {
        let mut batch = valid.to_vec();
        for _ in 0..1 + next() % 3 {
            match next() % 4 {
                0 | 1 => {
                    let at = (next() % batch.len() as u64) as usize;
                    batch[at] ^= 1 << (next() % 8);
                }
                2 => batch.truncate((next() % batch.len() as u64) as usize),
                _ => batch.push(next() as u8),
            }
            if batch.is_empty() {
                batch.push(0);
            }
        }
        let batch = if round % 2 == 0 {
            with_crc(batch)
        } else {
            batch
        };
        let (status, answer) = produce_batch(&server, "fuzz", 0, &batch).await;
        if status == StatusCode::OK {
            // A change that still makes a valid batch (a timestamp or a value byte): stored
            // as sent, and it decodes.
            decode_batch(&batch).expect("an accepted batch decodes");
            accepted += 4;
            continue;
        }
        assert!(status.is_client_error(), "round {round}: {status} {answer}");
        assert!(answer["code"].is_string(), "round {round}: {answer}");
    }
    assert_eq!(server.high_watermarks("fuzz").await, vec![accepted]);
}

#[tokio::test]
async fn binary_reads_page_by_whole_batches_and_long_poll() {
    let server = Server::start().await;
    server.create_topic("pages", 1).await;
    let now = common::now_ms();
    let mut sent = Vec::new();
    for _ in 0..4 {
        let batch = batch_of(&records(10, now), Compression::None);
        produce_batch_ok(&server, "pages", 0, &batch).await;
        sent.push(batch.to_vec());
    }
    server
        .produce_ok("pages", &json!({"messages": [{"value": 1}, {"value": 2}]}))
        .await;

    // From the middle of a batch: that batch whole, then the next, within max_messages.
    let read = read_binary(&server, "pages", 0, "offset=15&max_messages=10").await;
    assert_eq!(read.frames[0].0, 10);
    assert_eq!(read.frames[0].1, sent[1]);
    assert!(read.frames.len() <= 2, "{}", read.frames.len());
    assert_eq!(
        read.next_offset,
        read.frames.last().map_or(0, |(base, _)| base + 10)
    );
    assert_eq!(read.high_watermark, 42);

    // Paging with Herald-Next-Offset reaches every record once, JSON-produced ones included.
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for _ in 0..50 {
        if offset >= 42 {
            break;
        }
        let read = read_binary(
            &server,
            "pages",
            0,
            &format!("offset={offset}&max_messages=10"),
        )
        .await;
        for (base, batch) in &read.frames {
            let (_, records) = decode_batch(batch).expect("a stored batch decodes");
            offsets.extend(
                records
                    .iter()
                    .map(|record| base + u64::from(record.offset_delta))
                    .filter(|&at| at >= offset),
            );
        }
        offset = read.next_offset;
    }
    assert_eq!(offsets, (0..42).collect::<Vec<_>>());

    // At the end: empty, and a long poll answers when a batch arrives.
    let read = read_binary(&server, "pages", 0, "offset=42").await;
    assert!(read.frames.is_empty());
    assert_eq!(read.next_offset, 42);
    let poll = {
        let client = server.http_client().clone();
        let url = server.url("/v1/topics/pages/partitions/0/messages?offset=42&max_wait_ms=20000");
        tokio::spawn(async move {
            let response = client
                .get(url)
                .header("accept", BATCH)
                .send()
                .await
                .expect("GET");
            response.bytes().await.expect("body").len()
        })
    };
    let batch = batch_of(&records(3, now), Compression::None);
    produce_batch_ok(&server, "pages", 0, &batch).await;
    assert_eq!(poll.await.expect("poll"), 8 + batch.len());

    // A reader that prefers JSON still gets JSON.
    let response = server
        .http_client()
        .get(server.url("/v1/topics/pages/partitions/0/messages?offset=0"))
        .header(
            "accept",
            "application/json, application/vnd.herald.batch;q=0",
        )
        .send()
        .await
        .expect("GET");
    assert!(response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .starts_with("application/json"));
}

#[tokio::test]
async fn acks_leader_and_none_take_batches_too() {
    let server = Server::start().await;
    server.create_topic("acks", 1).await;
    let batch = batch_of(&records(5, common::now_ms()), Compression::None);
    let response = server
        .post_raw(
            "/v1/topics/acks/partitions/0/messages?acks=leader",
            BATCH,
            batch.to_vec(),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"partition": 0, "base_offset": 0, "record_count": 5})
    );
    let response = server
        .post_raw(
            "/v1/topics/acks/partitions/0/messages?acks=none",
            BATCH,
            batch.to_vec(),
        )
        .await;
    let (status, answer) = server.json(response).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer,
        json!({"partition": 0, "base_offset": null, "record_count": 5})
    );
    let server = &server;
    common::poll(
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(20),
        || async move {
            match server.high_watermarks("acks").await {
                marks if marks == vec![10] => Ok(()),
                marks => Err(format!("high watermarks {marks:?}")),
            }
        },
    )
    .await
    .unwrap_or_else(|seen| server.fail(&format!("the acks=none batch was not written: {seen}")));
}
