"""Confluent's own Python clients against Herald's schema registry (tests/it/schemas).

confluent-kafka's SchemaRegistryClient with its Avro, Protobuf and JSON Schema serializers and
deserializers, unchanged, pointed at `<node>/schema-registry`: register, evolve compatibly, be
refused an incompatible change, serialize records, produce them over Herald's HTTP API into
topics whose config names the subjects, be refused a payload that does not follow the subject
(nothing written), read the messages back and deserialize them, and read them decoded as JSON.

Usage: confluent_flow.py BASE_URL
Prints `confluent flow: ok` at the end; any failure raises.
"""

import base64
import json
import sys
import urllib.error
import urllib.request

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

BASE = sys.argv[1].rstrip("/")


def http(method, path, body=None):
    """One request to Herald's own API: (status, decoded JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read()
            return answer.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def create_topic(name, value_subject):
    status, body = http(
        "POST",
        "/v1/topics",
        {"name": name, "partitions": 1, "config": {"value_subject": value_subject}},
    )
    assert status in (200, 201), (status, body)
    assert body["config"]["value_subject"] == value_subject, body


def produce_bytes(topic, payloads):
    messages = [{"value_b64": base64.b64encode(p).decode()} for p in payloads]
    return http("POST", f"/v1/topics/{topic}/messages", {"messages": messages})


def high_watermark(topic):
    status, body = http("GET", f"/v1/topics/{topic}")
    assert status == 200, (status, body)
    return body["partitions"][0]["high_watermark"]


def read(topic, decode=False):
    query = "?offset=earliest&max_messages=1000" + ("&decode=json" if decode else "")
    status, body = http("GET", f"/v1/topics/{topic}/partitions/0/messages{query}")
    assert status == 200, (status, body)
    return body["messages"]


def refused(topic, payloads, what):
    before = high_watermark(topic)
    status, body = produce_bytes(topic, payloads)
    assert status == 400 and body["code"] == "schema_validation_failed", (what, status, body)
    assert high_watermark(topic) == before, f"{what}: something was written"
    return body["detail"]


registry = SchemaRegistryClient({"url": BASE + "/schema-registry"})

# ---- Avro: register, evolve, refuse an incompatible change ----
ORDER_V1 = json.dumps({
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
})
ORDER_V2 = json.dumps({
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "quantity", "type": "int", "default": 1},
    ],
})
ORDER_BAD = json.dumps({
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "quantity", "type": "int", "default": 1},
        {"name": "price", "type": "double"},
    ],
})
v1_id = registry.register_schema("orders-value", Schema(ORDER_V1, "AVRO"))
assert registry.register_schema("orders-value", Schema(ORDER_V1, "AVRO")) == v1_id
assert registry.test_compatibility("orders-value", Schema(ORDER_V2, "AVRO"))
v2_id = registry.register_schema("orders-value", Schema(ORDER_V2, "AVRO"))
assert v2_id != v1_id
assert not registry.test_compatibility("orders-value", Schema(ORDER_BAD, "AVRO"))
try:
    registry.register_schema("orders-value", Schema(ORDER_BAD, "AVRO"))
    raise AssertionError("an incompatible schema was registered")
except SchemaRegistryError as error:
    assert error.http_status_code == 409 and error.error_code == 409, error
assert registry.get_versions("orders-value") == [1, 2]
latest = registry.get_latest_version("orders-value")
assert latest.version == 2 and latest.schema_id == v2_id, latest
assert registry.lookup_schema("orders-value", Schema(ORDER_V1, "AVRO")).version == 1
try:
    registry.get_latest_version("no-such-subject")
    raise AssertionError("a missing subject was found")
except SchemaRegistryError as error:
    assert error.http_status_code == 404 and error.error_code == 40401, error

create_topic("orders", "orders-value")
context = SerializationContext("orders", MessageField.VALUE)
serialize = AvroSerializer(registry, ORDER_V2, conf={"auto.register.schemas": False, "use.latest.version": True})
orders = [{"id": n, "item": f"item-{n}", "quantity": n % 5 + 1} for n in range(20)]
payloads = [serialize(order, context) for order in orders]
status, body = produce_bytes("orders", payloads)
assert status in (200, 201), (status, body)

# What does not follow the subject is refused, and nothing of the request is written.
detail = refused("orders", [payloads[0], b"\x01\x00\x00\x00\x01garbage"], "wrong magic byte")
assert "message 1" in detail, detail
refused("orders", [payloads[0][:-3]], "a truncated record")
refused("orders", [b"\x00\x00\x00\x7f\x7f" + payloads[0][5:]], "an unknown schema id")
status, body = http("POST", "/v1/topics/orders/messages", {"messages": [{"value": {"id": 1}}]})
assert status == 400 and body["code"] == "schema_validation_failed", (status, body)

deserialize = AvroDeserializer(registry)
stored = read("orders")
assert [deserialize(base64.b64decode(m["value_b64"]), context) for m in stored] == orders
decoded = read("orders", decode=True)
assert [m["value"] for m in decoded] == orders, decoded[:2]
assert all(m["value_schema"]["id"] == v2_id for m in decoded), decoded[0]
assert decoded[0]["value_schema"]["subject"] == "orders-value", decoded[0]

# ---- Protobuf: a message type made at run time (no protoc), its file registered by the
# serializer itself (auto-registration, as base64 of its FileDescriptorProto) ----
proto_file = descriptor_pb2.FileDescriptorProto(name="acme/payment.proto", package="acme", syntax="proto3")
payment_type = proto_file.message_type.add(name="Payment")
for number, (name, kind) in enumerate([
    ("id", descriptor_pb2.FieldDescriptorProto.TYPE_STRING),
    ("amount", descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE),
    ("count", descriptor_pb2.FieldDescriptorProto.TYPE_INT64),
], start=1):
    payment_type.field.add(name=name, number=number, type=kind,
                           label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
pool = descriptor_pool.DescriptorPool()
pool.Add(proto_file)
Payment = message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.Payment"))

proto_context = SerializationContext("payments", MessageField.VALUE)
proto_serialize = ProtobufSerializer(Payment, registry, {"use.deprecated.format": False})
proto_payloads = [
    proto_serialize(Payment(id=f"p-{n}", amount=n * 1.5, count=n), proto_context) for n in range(10)
]
create_topic("payments", "payments-value")
status, body = produce_bytes("payments", proto_payloads)
assert status in (200, 201), (status, body)
refused("payments", [proto_payloads[1][:6] + b"\xff\xff\xff"], "a payload that is not a Payment")
proto_deserialize = ProtobufDeserializer(Payment, {"use.deprecated.format": False})
read_back = [proto_deserialize(base64.b64decode(m["value_b64"]), proto_context) for m in read("payments")]
assert [(p.id, p.amount, p.count) for p in read_back] == [(f"p-{n}", n * 1.5, n) for n in range(10)]
decoded = read("payments", decode=True)
assert decoded[3]["value"]["id"] == "p-3", decoded[3]
assert decoded[3]["value"]["amount"] == 4.5, decoded[3]

# ---- JSON Schema: the serializer's wire format, and plain JSON values checked at the edge ----
EVENT = json.dumps({
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event", "type": "object",
    "properties": {"kind": {"type": "string"}, "at": {"type": "integer"}},
    "required": ["kind", "at"],
})
json_context = SerializationContext("events", MessageField.VALUE)
json_serialize = JSONSerializer(EVENT, registry)
events = [{"kind": "click", "at": n} for n in range(5)]
json_payloads = [json_serialize(event, json_context) for event in events]
create_topic("events", "events-value")
status, body = produce_bytes("events", json_payloads)
assert status in (200, 201), (status, body)
status, body = http("POST", "/v1/topics/events/messages", {"messages": [{"value": {"kind": "view", "at": 9}}]})
assert status in (200, 201), (status, body)
before = high_watermark("events")
status, body = http("POST", "/v1/topics/events/messages", {"messages": [
    {"value": {"kind": "view", "at": 10}}, {"value": {"kind": "view", "at": "soon"}},
]})
assert status == 400 and body["code"] == "schema_validation_failed", (status, body)
assert "message 1" in body["detail"] and "at" in body["detail"], body
assert high_watermark("events") == before
json_deserialize = JSONDeserializer(EVENT)
stored = read("events")
assert [json_deserialize(base64.b64decode(m["value_b64"]), json_context) for m in stored[:5]] == events
assert stored[5]["value"] == {"kind": "view", "at": 9}

# ---- Deletes: soft, then permanent; ids of soft-deleted versions still resolve ----
scratch_id = registry.register_schema("scratch-value", Schema('"string"', "AVRO"))
assert registry.delete_subject("scratch-value") == [1]
assert "scratch-value" not in registry.get_subjects()
assert registry.get_schema(scratch_id).schema_str == '"string"'
assert registry.delete_subject("scratch-value", permanent=True) == [1]

print("confluent flow: ok")
