// The schema registry (/schema-registry, Confluent's API): what the console reads of it, and
// how it shows it.
import type { Topic } from "./api";

export const REGISTRY = "/schema-registry";

export type SchemaType = "AVRO" | "PROTOBUF" | "JSON";

export interface SchemaReference {
  name: string;
  subject: string;
  version: number;
}

/** `GET /schema-registry/subjects/{subject}/versions/{version}`. */
export interface SubjectVersion {
  subject: string;
  id: number;
  version: number;
  /** Absent for Avro. */
  schemaType?: SchemaType;
  schema: string;
  references?: SchemaReference[];
}

/** The schema a decoded part of a message was read with (`decode=json`). */
export interface DecodedSchema {
  id: number;
  subject?: string | null;
  version?: number | null;
}

/** Compatibility levels, as the registry names them. */
export const COMPATIBILITY_LEVELS = ["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"] as const;

export function schemaType(version: Pick<SubjectVersion, "schemaType">): SchemaType {
  return version.schemaType ?? "AVRO";
}

/** A schema's text for reading: Avro and JSON Schema indented when they parse as JSON, Protobuf as it is. */
export function prettySchema(text: string, type: SchemaType | undefined): string {
  if (type === "PROTOBUF") return text;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

export interface SubjectUse {
  topic: string;
  as: "key" | "value";
}

/** For each subject, the topics whose config names it (`key_subject`, `value_subject`), by topic name. */
export function subjectUses(topics: Topic[]): Map<string, SubjectUse[]> {
  const uses = new Map<string, SubjectUse[]>();
  const add = (subject: unknown, use: SubjectUse) => {
    if (typeof subject !== "string" || subject === "") return;
    const list = uses.get(subject) ?? [];
    list.push(use);
    uses.set(subject, list);
  };
  for (const topic of [...topics].sort((a, b) => a.name.localeCompare(b.name))) {
    add(topic.config?.key_subject, { topic: topic.name, as: "key" });
    add(topic.config?.value_subject, { topic: topic.name, as: "value" });
  }
  return uses;
}

/** `schema 7 · orders-value v2` (or `schema 7` when the answer names no subject). */
export function schemaLabel(schema: DecodedSchema): string {
  const where = schema.subject ? ` · ${schema.subject}${schema.version != null ? ` v${schema.version}` : ""}` : "";
  return `schema ${schema.id}${where}`;
}

/** The two versions to compare at first: the one before the latest, and the latest. */
export function defaultPair(versions: number[]): [number, number] | undefined {
  if (versions.length === 0) return undefined;
  const sorted = [...versions].sort((a, b) => a - b);
  const latest = sorted[sorted.length - 1];
  return [sorted.length > 1 ? sorted[sorted.length - 2] : latest, latest];
}
