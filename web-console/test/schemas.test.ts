import { describe, expect, it } from "vitest";
import type { Topic } from "../src/lib/api";
import { displayKey } from "../src/lib/format";
import { defaultPair, prettySchema, schemaLabel, schemaType, subjectUses } from "../src/lib/schemas";

const topic = (name: string, config: Record<string, unknown>): Topic => ({
  name,
  partitions: [],
  replication_factor: 1,
  config: { retention_ms: -1, retention_bytes: -1, cleanup_policy: "delete", max_message_bytes: 1048576, compression: "none", ...config },
});

describe("schemas", () => {
  it("pretty-prints Avro and JSON Schema, leaves Protobuf and what does not parse as it is", () => {
    expect(prettySchema('{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}', "AVRO")).toBe(
      '{\n  "type": "record",\n  "name": "Order",\n  "fields": [\n    {\n      "name": "id",\n      "type": "string"\n    }\n  ]\n}',
    );
    expect(prettySchema('{"type":"object"}', "JSON")).toBe('{\n  "type": "object"\n}');
    expect(prettySchema('"string"', undefined)).toBe('"string"');
    const proto = 'syntax = "proto3";\nmessage Order { string id = 1; }';
    expect(prettySchema(proto, "PROTOBUF")).toBe(proto);
    expect(prettySchema("{not json", "AVRO")).toBe("{not json");
  });

  it("calls a schema without schemaType Avro", () => {
    expect(schemaType({})).toBe("AVRO");
    expect(schemaType({ schemaType: "PROTOBUF" })).toBe("PROTOBUF");
  });

  it("maps subjects to the topics whose config names them, by topic", () => {
    const uses = subjectUses([
      topic("payments", { value_subject: "orders-value" }),
      topic("orders", { key_subject: "orders-key", value_subject: "orders-value" }),
      topic("plain", {}),
      topic("cleared", { key_subject: null }),
    ]);
    expect(uses.get("orders-value")).toEqual([
      { topic: "orders", as: "value" },
      { topic: "payments", as: "value" },
    ]);
    expect(uses.get("orders-key")).toEqual([{ topic: "orders", as: "key" }]);
    expect([...uses.keys()].sort()).toEqual(["orders-key", "orders-value"]);
  });

  it("labels the schema a message was decoded with", () => {
    expect(schemaLabel({ id: 7, subject: "orders-value", version: 2 })).toBe("schema 7 · orders-value v2");
    expect(schemaLabel({ id: 7 })).toBe("schema 7");
    expect(schemaLabel({ id: 7, subject: "orders-value", version: null })).toBe("schema 7 · orders-value");
  });

  it("compares the version before the latest with the latest first", () => {
    expect(defaultPair([])).toBeUndefined();
    expect(defaultPair([1])).toEqual([1, 1]);
    expect(defaultPair([3, 1, 2])).toEqual([2, 3]);
  });

  it("shows a decoded key as JSON", () => {
    expect(displayKey({ key_json: { id: 42 }, key_b64: "AAAAAAEC" })).toBe('{"id":42}');
    expect(displayKey({ key: "user-42" })).toBe("user-42");
  });
});
