import type { ComponentChildren, JSX } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { BASE, navigate } from "../lib/router";

/** An in-app link: a real <a href> (keyboard, middle click), routed without a reload. */
export function Link(props: { href: string; children: ComponentChildren; class?: string; "aria-current"?: "page" | undefined }) {
  const onClick = (event: MouseEvent) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(props.href);
  };
  return (
    <a href={`${BASE}${props.href}`} class={props.class} onClick={onClick} aria-current={props["aria-current"]}>
      {props.children}
    </a>
  );
}

export function ErrorText({ error }: { error: unknown }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      {error instanceof Error ? error.message : String(error)}
    </p>
  );
}

export interface Loaded<T> {
  data: T | undefined;
  error: unknown;
  reload: () => void;
}

/** Loads with `load`, again every `everyMs` when given, and when `deps` change. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[], everyMs?: number): Loaded<T> {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const value = await loadRef.current();
        if (!live) return;
        setData(value);
        setError(undefined);
      } catch (e) {
        if (live) setError(e);
      }
      if (live && everyMs) timer = setTimeout(run, everyMs);
    };
    run();
    return () => {
      live = false;
      if (timer) clearTimeout(timer);
    };
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((n) => n + 1) };
}

/** Runs an action, shows its error or result, disables the button meanwhile. */
export function useAction(): [boolean, unknown, (run: () => Promise<unknown>) => Promise<void>, string | undefined] {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const [done, setDone] = useState<string | undefined>(undefined);
  const act = async (run: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    setDone(undefined);
    try {
      const result = await run();
      setDone(typeof result === "string" ? result : undefined);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return [busy, error, act, done];
}

let fieldIds = 0;

/** A labelled input: the label names the control for screen readers and tests. */
export function Field(props: { label: string; children: (id: string) => JSX.Element; hint?: string }) {
  const [id] = useState(() => `field-${++fieldIds}`);
  return (
    <div class="field">
      <label for={id}>{props.label}</label>
      {props.children(id)}
      {props.hint && <small>{props.hint}</small>}
    </div>
  );
}

/** A dangerous action behind a confirmation that asks to type the name. */
export function ConfirmButton(props: { label: string; name: string; what: string; onConfirm: () => Promise<unknown> }) {
  const [open, setOpen] = useState(false);
  const [typed, setTyped] = useState("");
  const [busy, error, act] = useAction();
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (open) input.current?.focus();
  }, [open]);
  if (!open) {
    return (
      <button type="button" class="danger" onClick={() => setOpen(true)}>
        {props.label}
      </button>
    );
  }
  return (
    <form
      class="confirm"
      role="alertdialog"
      aria-label={`Confirm: ${props.label}`}
      onSubmit={(event) => {
        event.preventDefault();
        act(props.onConfirm);
      }}
    >
      <label>
        {props.what} Type <strong>{props.name}</strong> to confirm:{" "}
        <input ref={input} value={typed} onInput={(e) => setTyped(e.currentTarget.value)} aria-label="Name to confirm" />
      </label>
      <button type="submit" class="danger" disabled={typed !== props.name || busy}>
        {props.label}
      </button>
      <button type="button" onClick={() => setOpen(false)}>
        Cancel
      </button>
      <ErrorText error={error} />
    </form>
  );
}

export function Stat(props: { label: string; value: ComponentChildren; testId?: string }) {
  return (
    <div class="stat">
      <div class="stat-label">{props.label}</div>
      <div class="stat-value" data-testid={props.testId}>
        {props.value}
      </div>
    </div>
  );
}
