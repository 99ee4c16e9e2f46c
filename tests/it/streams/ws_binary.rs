//! Binary WebSocket frames (`docs/websocket.md` § Binary frames): a `publish` whose raw values
//! follow its JSON header is stored like a JSON one (raw bytes as bytes, JSON as JSON), a
//! subscription with `"format": "binary"` gets its messages the same way, and a malformed binary
//! frame is answered with an `error` frame while the socket stays open.

use crate::common::ws::{connect, next_data_frame, next_frame, send, subscribe, Socket};
use crate::common::Server;
use futures::SinkExt;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A binary frame: the header's length (u32, big-endian), the JSON header, the values.
fn binary_frame(header: &Value, values: &[&[u8]]) -> Message {
    let header = header.to_string();
    let mut frame = (header.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(header.as_bytes());
    for value in values {
        frame.extend_from_slice(value);
    }
    Message::binary(frame)
}

/// A binary frame split into its JSON header and each message's value.
fn split_binary(frame: &[u8]) -> (Value, Vec<Vec<u8>>) {
    let header_len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&frame[4..4 + header_len]).expect("JSON header");
    let mut rest = &frame[4 + header_len..];
    let mut values = Vec::new();
    for message in header["messages"].as_array().expect("messages") {
        let (value, tail) = rest.split_at(message["value_len"].as_u64().unwrap() as usize);
        values.push(value.to_vec());
        rest = tail;
    }
    assert!(rest.is_empty(), "the values fill the frame exactly");
    (header, values)
}

/// The next binary frame, split.
async fn next_binary(socket: &mut Socket) -> (Value, Vec<Vec<u8>>) {
    match next_data_frame(socket).await {
        Message::Binary(frame) => split_binary(&frame),
        other => panic!("expected a binary frame, got {other:?}"),
    }
}

#[tokio::test]
async fn binary_publish_and_binary_subscriptions_carry_raw_values() {
    let server = Server::start().await;
    server.create_topic("raw", 1).await;
    server.wait_for_leaders("raw").await;
    let mut socket = connect(&server).await;

    let raw: &[u8] = b"\x00\xff\xfe raw";
    let header = json!({"op": "publish", "id": "b1", "topic": "raw", "messages": [
        {"key": "k", "value_len": raw.len(), "headers": {"h": "v"}},
        {"value_len": 9, "value_format": "json"},
    ]});
    socket
        .send(binary_frame(&header, &[raw, br#"{"n": 1 }"#]))
        .await
        .unwrap();
    let published = next_frame(&mut socket).await;
    assert_eq!(published["op"], "published", "{published}");
    assert_eq!(published["id"], "b1");
    assert_eq!(published["offsets"][1]["offset"], 1);

    // Stored as a JSON publish would store them: raw bytes as value_b64, JSON exactly as sent.
    let read = server
        .http_client()
        .get(server.url("/v1/topics/raw/partitions/0/messages?offset=0"))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(read["messages"][0]["value_b64"], "AP/+IHJhdw==");
    assert_eq!(read["messages"][0]["key"], "k");
    assert_eq!(read["messages"][0]["headers"]["h"], "v");
    assert_eq!(read["messages"][1]["value"], json!({"n": 1}));

    // A binary subscription: values after the header, raw.
    subscribe(
        &mut socket,
        json!({"op": "subscribe", "id": "s", "topic": "raw", "from": "earliest", "format": "binary"}),
    )
    .await;
    let (header, values) = next_binary(&mut socket).await;
    assert_eq!(header["op"], "messages");
    assert_eq!(header["id"], "s");
    let messages = header["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{header}");
    assert_eq!(messages[0]["value_format"], "bytes");
    assert_eq!(messages[0]["resume"], "0:1");
    assert_eq!(messages[0]["key"], "k");
    assert_eq!(messages[1]["value_format"], "json");
    assert!(messages[1].get("value").is_none() && messages[1].get("value_b64").is_none());
    assert_eq!(values, vec![raw.to_vec(), br#"{"n": 1 }"#.to_vec()]);

    // Malformed binary frames: an error frame each, and the socket keeps working.
    socket
        .send(Message::binary(b"\x00\x00\x00\xffabc".to_vec()))
        .await
        .unwrap();
    let error = next_frame(&mut socket).await;
    assert_eq!(error["op"], "error");
    assert_eq!(error["error"]["code"], "invalid_request");
    let short =
        json!({"op": "publish", "id": "b2", "topic": "raw", "messages": [{"value_len": 10}]});
    socket.send(binary_frame(&short, &[b"abc"])).await.unwrap();
    let error = next_frame(&mut socket).await;
    assert_eq!(error["id"], "b2");
    assert!(
        error["error"]["detail"]
            .as_str()
            .unwrap()
            .contains("add up to 10"),
        "{error}"
    );
    let not_json = json!({"op": "publish", "id": "b3", "topic": "raw",
                          "messages": [{"value_len": 2, "value_format": "json"}]});
    socket
        .send(binary_frame(&not_json, &[b"{x"]))
        .await
        .unwrap();
    assert_eq!(next_frame(&mut socket).await["id"], "b3");

    send(
        &mut socket,
        json!({"op": "publish", "id": "j", "topic": "raw", "messages": [{"value": "after"}]}),
    )
    .await;
    // The answer and the delivery race each other: take both, in either order.
    let (mut published, mut delivered) = (None, None);
    while published.is_none() || delivered.is_none() {
        match next_data_frame(&mut socket).await {
            Message::Text(text) => published = Some(serde_json::from_str::<Value>(&text).unwrap()),
            Message::Binary(frame) => delivered = Some(split_binary(&frame)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(published.unwrap()["id"], "j");
    let (header, values) = delivered.unwrap();
    assert_eq!(header["messages"][0]["offset"], 2);
    assert_eq!(values, vec![br#""after""#.to_vec()]);
    // Nothing the refused frames held was written.
    assert_eq!(server.high_watermarks("raw").await, vec![3]);
}
