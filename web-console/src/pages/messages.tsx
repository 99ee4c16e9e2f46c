import { useEffect, useRef, useState } from "preact/hooks";
import { enc, type Message, type MessagePage, type Topic } from "../lib/api";
import { api } from "../lib/client";
import { displayKey, formatTime, partitionForKey, previewValue, renderValue } from "../lib/format";
import { navigate } from "../lib/router";
import { schemaLabel } from "../lib/schemas";
import { listTopics } from "../lib/topics";
import { ErrorText, Field, useAction, useLoad } from "../components/ui";

/** A key search reads at most this many messages per partition (newest kept). */
const KEY_SCAN_LIMIT = 10_000;
const PAGE = 500;
const TAIL_KEEP = 200;
/** The topic picker suggests at most this many names. */
const SUGGESTIONS = 100;

type Mode = "offset" | "timestamp" | "key";

export function Messages({ topic }: { topic: string }) {
  // The topic itself, not the list of every topic (a cluster may have thousands).
  const current = useLoad(() => (topic ? api.get<Topic>(`/v1/topics/${enc(topic)}`) : Promise.resolve(undefined)), [topic]);
  const shown = current.data?.name === topic ? current.data : undefined;
  return (
    <>
      <h1>Messages</h1>
      <TopicPicker topic={topic} />
      {topic && <ErrorText error={current.error} />}
      {shown && (
        <div key={topic}>
          <Browse topic={shown} />
          <div class="columns">
            <Produce topic={shown} />
            <LiveTail topic={shown.name} />
          </div>
        </div>
      )}
    </>
  );
}

/** Suggests the first names that start with what is typed, a page of them, not every topic. */
function TopicPicker({ topic }: { topic: string }) {
  const [typed, setTyped] = useState(topic);
  useEffect(() => setTyped(topic), [topic]);
  const suggestions = useLoad(() => listTopics(api, { limit: SUGGESTIONS, prefix: typed }), [typed]);
  const names = (suggestions.data?.topics ?? []).map((t) => t.name);
  const open = (name: string) => {
    if (name && name !== topic) navigate(`/messages?topic=${enc(name)}`);
  };
  return (
    <form
      class="toolbar"
      aria-label="Choose a topic"
      onSubmit={(event) => {
        event.preventDefault();
        open(typed.trim());
      }}
    >
      <Field label="Topic" hint={`names starting with what you type (the first ${SUGGESTIONS})`}>
        {(id) => (
          <>
            <input
              id={id}
              list={`${id}-names`}
              required
              autocomplete="off"
              placeholder="choose a topic…"
              value={typed}
              onInput={(e) => {
                const value = e.currentTarget.value;
                setTyped(value);
                // A name picked from the suggestions (not typed) opens at once.
                const kind = (e as unknown as InputEvent).inputType;
                if ((kind === undefined || kind === "insertReplacementText") && names.includes(value)) open(value);
              }}
            />
            <datalist id={`${id}-names`} data-testid="topic-suggestions">
              {names.map((name) => (
                <option key={name} value={name} />
              ))}
            </datalist>
          </>
        )}
      </Field>
      <button type="submit">Open</button>
      <ErrorText error={suggestions.error} />
    </form>
  );
}

function Browse({ topic }: { topic: Topic }) {
  const [mode, setMode] = useState<Mode>("offset");
  const [partition, setPartition] = useState("0");
  const [offset, setOffset] = useState("earliest");
  const [time, setTime] = useState("");
  const [key, setKey] = useState("");
  const [allPartitions, setAllPartitions] = useState(false);
  const [limit, setLimit] = useState("50");
  const [decode, setDecode] = useState(false);
  const [found, setFound] = useState<{ messages: Message[]; note: string } | undefined>(undefined);
  const [busy, error, act] = useAction();
  const read = (p: number, from: string | number, max: number) =>
    api.get<MessagePage>(`/v1/topics/${enc(topic.name)}/partitions/${p}/messages?offset=${from}&max_messages=${max}${decode ? "&decode=json" : ""}`);

  const search = () =>
    act(async () => {
      const max = Math.max(1, Math.min(1000, Number(limit) || 50));
      if (mode === "offset") {
        const page = await read(Number(partition), offset.trim() || "earliest", max);
        setFound({ messages: page.messages, note: `partition ${partition}: log start ${page.log_start_offset}, high watermark ${page.high_watermark}` });
      } else if (mode === "timestamp") {
        const at = Date.parse(time.endsWith("Z") ? time : `${time}Z`);
        if (Number.isNaN(at)) throw new Error("Give a time as YYYY-MM-DDTHH:MM (UTC)");
        const partitions = partition === "all" ? topic.partitions.map((p) => p.partition) : [Number(partition)];
        const all: Message[] = [];
        for (const p of partitions) {
          const { offset: first } = await api.get<{ offset: number }>(`/v1/topics/${enc(topic.name)}/partitions/${p}/offsets?timestamp=${at}`);
          all.push(...(await read(p, first, max)).messages);
        }
        all.sort((a, b) => a.timestamp - b.timestamp || a.partition - b.partition);
        setFound({ messages: all.slice(0, max), note: `from ${formatTime(at)} UTC` });
      } else {
        if (!key) throw new Error("Give a key");
        // Where each partition ends now, not when the page was loaded.
        const fresh = await api.get<Topic>(`/v1/topics/${enc(topic.name)}`);
        const keyed = partitionForKey(key, fresh.partitions.length);
        const partitions = allPartitions ? fresh.partitions : fresh.partitions.filter((p) => p.partition === keyed);
        const matches: Message[] = [];
        let scanned = 0;
        for (const p of partitions) {
          let next = Math.max(p.log_start_offset, p.high_watermark - KEY_SCAN_LIMIT);
          while (next < p.high_watermark) {
            const page = await read(p.partition, next, PAGE);
            if (page.messages.length === 0) break;
            scanned += page.messages.length;
            matches.push(...page.messages.filter((m) => m.key === key));
            next = page.next_offset;
          }
        }
        setFound({
          messages: matches.slice(-max),
          note: `${matches.length} with key "${key}" among ${scanned} messages read (${allPartitions ? "every partition" : `partition ${keyed}, where the key goes now`}; the last ${KEY_SCAN_LIMIT} of each)`,
        });
      }
    });

  return (
    <section class="panel" aria-label="Find messages">
      <h2>Find messages</h2>
      <div role="radiogroup" aria-label="Search by" class="tabs">
        {(["offset", "timestamp", "key"] as Mode[]).map((m) => (
          <label key={m} class="check">
            <input type="radio" name="mode" value={m} checked={mode === m} onChange={() => setMode(m)} /> by {m}
          </label>
        ))}
      </div>
      <form
        aria-label="Search"
        onSubmit={(event) => {
          event.preventDefault();
          search();
        }}
      >
        <div class="row">
          {mode !== "key" && (
            <Field label="Partition">
              {(id) => (
                <select id={id} value={partition} onChange={(e) => setPartition(e.currentTarget.value)}>
                  {mode === "timestamp" && <option value="all">all</option>}
                  {topic.partitions.map((p) => (
                    <option key={p.partition} value={String(p.partition)}>
                      {p.partition}
                    </option>
                  ))}
                </select>
              )}
            </Field>
          )}
          {mode === "offset" && (
            <Field label="From offset" hint="a number, earliest or latest">
              {(id) => <input id={id} value={offset} onInput={(e) => setOffset(e.currentTarget.value)} />}
            </Field>
          )}
          {mode === "timestamp" && (
            <Field label="From time (UTC)">
              {(id) => <input id={id} type="datetime-local" step="1" required value={time} onInput={(e) => setTime(e.currentTarget.value)} />}
            </Field>
          )}
          {mode === "key" && (
            <>
              <Field label="Key">{(id) => <input id={id} required value={key} onInput={(e) => setKey(e.currentTarget.value)} />}</Field>
              <label class="check">
                <input type="checkbox" checked={allPartitions} onChange={(e) => setAllPartitions(e.currentTarget.checked)} /> every partition
              </label>
            </>
          )}
          <Field label="At most">
            {(id) => <input id={id} type="number" min={1} max={1000} value={limit} onInput={(e) => setLimit(e.currentTarget.value)} />}
          </Field>
          <label class="check" title="decode=json: values (and keys) in Confluent's wire format come back as JSON, decoded with their schema">
            <input type="checkbox" checked={decode} onChange={(e) => setDecode(e.currentTarget.checked)} /> decode with schemas
          </label>
        </div>
        <button type="submit" disabled={busy}>
          Find
        </button>
      </form>
      <ErrorText error={error} />
      {found && (
        <>
          <p class="note" role="status">
            {found.messages.length} messages; {found.note}
          </p>
          <MessageList messages={found.messages} testId="found-messages" />
        </>
      )}
    </section>
  );
}

export function MessageList({ messages, testId }: { messages: Message[]; testId: string }) {
  return (
    <ol class="messages" data-testid={testId}>
      {messages.map((m) => (
        <MessageItem key={`${m.partition}:${m.offset}`} message={m} />
      ))}
    </ol>
  );
}

function MessageItem({ message }: { message: Message }) {
  const [bytesAs, setBytesAs] = useState<"hex" | "base64">("hex");
  const value = renderValue(message, bytesAs);
  const headers = Object.entries(message.headers ?? {});
  const key = displayKey(message);
  return (
    <li>
      <details>
        <summary>
          <span class="pos">
            {message.partition}:{message.offset}
          </span>{" "}
          <span class="time">{formatTime(message.timestamp)}</span> {key && <span class="key">{key}</span>}{" "}
          <code class="preview">{previewValue(message)}</code>
          {message.value_schema && (
            <span class="badge" data-testid="value-schema">
              {schemaLabel(message.value_schema)}
            </span>
          )}
          {message.decode_error && <span class="badge warn">not decoded</span>}
        </summary>
        <div class="message-body">
          {value.kind === "bytes" && (
            <div role="radiogroup" aria-label="Show bytes as" class="tabs">
              {(["hex", "base64"] as const).map((as) => (
                <label key={as} class="check">
                  <input type="radio" name={`bytes-${message.partition}-${message.offset}`} checked={bytesAs === as} onChange={() => setBytesAs(as)} /> {as}
                </label>
              ))}
            </div>
          )}
          <pre class="value" data-kind={value.kind}>
            {value.kind === "none" ? "(no value)" : value.text}
          </pre>
          {message.key_schema && (
            <p class="note" data-testid="key-schema">
              key decoded with {schemaLabel(message.key_schema)}
            </p>
          )}
          {message.decode_error && (
            <p class="note" data-testid="decode-error">
              Not decoded: {message.decode_error}
            </p>
          )}
          {headers.length > 0 && (
            <table class="headers">
              <caption>Headers</caption>
              <tbody>
                {headers.map(([name, v]) => (
                  <tr key={name}>
                    <th scope="row">{name}</th>
                    <td>{v}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          )}
        </div>
      </details>
    </li>
  );
}

function Produce({ topic }: { topic: Topic }) {
  const [key, setKey] = useState("");
  const [partition, setPartition] = useState("");
  const [value, setValue] = useState('{"hello":"herald"}');
  const [asText, setAsText] = useState(false);
  const [headers, setHeaders] = useState("");
  const [busy, error, act, done] = useAction();
  return (
    <form
      class="panel"
      aria-label="Produce a message"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          const message: Record<string, unknown> = { value: asText ? value : JSON.parse(value) };
          if (key) message.key = key;
          if (partition !== "") message.partition = Number(partition);
          if (headers.trim()) message.headers = JSON.parse(headers);
          const answer = await api.post<{ offsets: { partition: number; offset: number }[] }>(`/v1/topics/${enc(topic.name)}/messages?acks=all`, {
            messages: [message],
          });
          const at = answer.offsets[0];
          return `stored at partition ${at.partition}, offset ${at.offset}`;
        });
      }}
    >
      <h2>Produce a test message</h2>
      <Field label="Key (optional)">{(id) => <input id={id} value={key} onInput={(e) => setKey(e.currentTarget.value)} />}</Field>
      <Field label="Partition (optional)">
        {(id) => (
          <select id={id} value={partition} onChange={(e) => setPartition(e.currentTarget.value)}>
            <option value="">by key, or round-robin</option>
            {topic.partitions.map((p) => (
              <option key={p.partition} value={String(p.partition)}>
                {p.partition}
              </option>
            ))}
          </select>
        )}
      </Field>
      <Field label="Value">{(id) => <textarea id={id} rows={4} value={value} onInput={(e) => setValue(e.currentTarget.value)} />}</Field>
      <label class="check">
        <input type="checkbox" checked={asText} onChange={(e) => setAsText(e.currentTarget.checked)} /> send the value as a JSON string (not parsed)
      </label>
      <Field label="Headers (JSON object, optional)">
        {(id) => <input id={id} placeholder='{"trace":"abc"}' value={headers} onInput={(e) => setHeaders(e.currentTarget.value)} />}
      </Field>
      <button type="submit" disabled={busy}>
        Produce
      </button>
      {done && (
        <p role="status" data-testid="produced">
          {done}
        </p>
      )}
      <ErrorText error={error} />
    </form>
  );
}

type TailState = "idle" | "connecting" | "open" | "closed";

/** Follows the topic over the WebSocket API (subprotocol herald.v1), newest first. */
function LiveTail({ topic }: { topic: string }) {
  const [state, setState] = useState<TailState>("idle");
  const [messages, setMessages] = useState<Message[]>([]);
  const [problem, setProblem] = useState<string | undefined>(undefined);
  const socket = useRef<WebSocket | null>(null);

  const stop = () => {
    socket.current?.close(1000);
    socket.current = null;
  };
  useEffect(() => stop, [topic]);
  // A renewed token is handed to the open socket, which would otherwise close when the old one expires.
  useEffect(
    () =>
      api.subscribe(() => {
        const session = api.current;
        if (session && socket.current?.readyState === WebSocket.OPEN) {
          socket.current.send(JSON.stringify({ op: "auth", id: "renew", token: session.token }));
        }
      }),
    [],
  );

  const start = () => {
    setProblem(undefined);
    setState("connecting");
    const ws = new WebSocket(api.webSocketUrl(location), "herald.v1");
    socket.current = ws;
    ws.onopen = () => ws.send(JSON.stringify({ op: "subscribe", id: "tail", topic, from: "latest" }));
    ws.onmessage = (event) => {
      const frame = JSON.parse(String(event.data));
      if (frame.op === "ok" && frame.id === "tail") setState("open");
      else if (frame.op === "messages") {
        const got = frame.messages as Message[];
        setMessages((shown) => [...got.slice().reverse(), ...shown].slice(0, TAIL_KEEP));
        // Give back the credit they spent, so the server keeps sending.
        ws.send(JSON.stringify({ op: "credit", id: "tail", messages: got.length }));
      } else if (frame.op === "error") {
        setProblem(frame.error?.detail ?? "refused");
      }
    };
    ws.onclose = (event) => {
      if (socket.current === ws) socket.current = null;
      setState("closed");
      if (event.code !== 1000) setProblem(`closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`);
    };
  };

  return (
    <section class="panel" aria-label="Live tail">
      <h2>Live tail</h2>
      <p>
        <span class={`status status-${state}`} data-testid="tail-state" data-state={state}>
          {state}
        </span>{" "}
        {state === "open" || state === "connecting" ? (
          <button type="button" onClick={() => stop()}>
            Stop
          </button>
        ) : (
          <button type="button" onClick={() => start()}>
            Start live tail
          </button>
        )}{" "}
        <span class="note">new messages over the WebSocket, newest first (last {TAIL_KEEP})</span>
      </p>
      {problem && (
        <p class="error" role="alert">
          {problem}
        </p>
      )}
      <MessageList messages={messages} testId="tail-messages" />
    </section>
  );
}
