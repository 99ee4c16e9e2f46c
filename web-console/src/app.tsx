import { useEffect, useState } from "preact/hooks";
import { ApiError } from "./lib/api";
import { api } from "./lib/client";
import { formatDuration } from "./lib/format";
import { match, usePath } from "./lib/router";
import { ErrorText, Field, Link, useAction } from "./components/ui";
import { Overview } from "./pages/overview";
import { TopicDetail, Topics } from "./pages/topics";
import { Messages } from "./pages/messages";
import { SchemaDetail, Schemas } from "./pages/schemas";
import { GroupDetail, Groups } from "./pages/groups";
import { SubscriptionDetail, Subscriptions } from "./pages/subscriptions";
import { ClusterPage } from "./pages/cluster";
import { Security } from "./pages/security";

/**
 * The token is renewed silently; if that keeps failing, ask for the secret this long before it
 * expires (or in its last tenth, for tokens of under 10 minutes).
 */
const PROMPT_BEFORE_MS = 60 * 1000;

const NAV: [string, string][] = [
  ["/", "Overview"],
  ["/topics", "Topics"],
  ["/messages", "Messages"],
  ["/schemas", "Schemas"],
  ["/groups", "Consumer groups"],
  ["/subscriptions", "Subscriptions"],
  ["/cluster", "Cluster"],
  ["/security", "Security"],
];

/** Whether the node has authentication on (it marks the page it serves). */
const AUTH_ON = document.querySelector('meta[name="herald-auth"]')?.getAttribute("content") === "on";

type AuthState = "checking" | "open" | "signed-in" | "sign-in" | "unreachable";

export function App() {
  const [path, query] = usePath();
  const [auth, setAuth] = useState<AuthState>(AUTH_ON ? (api.current ? "checking" : "sign-in") : "open");
  const [problem, setProblem] = useState<unknown>(undefined);
  const [, setTick] = useState(0);

  // The node says in the page whether it wants a token; a refused request says so too.
  const check = async () => {
    if (AUTH_ON && !api.current) {
      setAuth("sign-in");
      return;
    }
    if (!AUTH_ON) {
      // Nothing to check first: the pages load at once (and show their own errors).
      setAuth("open");
      return;
    }
    try {
      await api.get("/v1/cluster");
      setAuth(api.current ? "signed-in" : "open");
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) setAuth("sign-in");
      else if (error instanceof ApiError && error.status === 403) setAuth(api.current ? "signed-in" : "sign-in");
      else {
        setProblem(error);
        setAuth("unreachable");
      }
    }
  };
  useEffect(() => {
    check();
    return api.subscribe(() => {
      if (!api.current) check();
      setTick((n) => n + 1);
    });
  }, []);
  // Re-render every 15 s so the last-minute prompt appears in time.
  useEffect(() => {
    const timer = setInterval(() => setTick((n) => n + 1), 15_000);
    return () => clearInterval(timer);
  }, []);

  if (auth === "checking") return <p class="loading">Connecting…</p>;
  if (auth === "unreachable") {
    return (
      <main class="centered">
        <h1>Herald console</h1>
        <ErrorText error={problem} />
        <button type="button" onClick={() => check()}>
          Retry
        </button>
      </main>
    );
  }
  if (auth === "sign-in") {
    return (
      <main class="centered">
        <h1>Herald console</h1>
        <p>This node requires authentication. Sign in with an OAuth2 client's credentials.</p>
        <SignIn onDone={() => check()} />
      </main>
    );
  }

  const session = api.current;
  const remaining = session ? session.expiresAtMs - api.now() : Infinity;
  const promptBefore = Math.min(PROMPT_BEFORE_MS, (session?.lifetimeMs ?? Infinity) / 10);
  const page = route(path, query);
  const section = NAV.filter(([href]) => href !== "/" && (path === href || path.startsWith(`${href}/`)))[0]?.[0] ?? (path === "/" ? "/" : "");
  return (
    <div class="layout">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Herald</span>
        <nav aria-label="Sections">
          <ul>
            {NAV.map(([href, label]) => (
              <li key={href}>
                <Link href={href} aria-current={section === href ? "page" : undefined}>
                  {label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          {session ? (
            <>
              <span>{session.clientId}</span>{" "}
              <button type="button" onClick={() => api.signOut()}>
                Sign out
              </button>
            </>
          ) : (
            <span title="The node has authentication off (loopback quick start)">no sign-in needed</span>
          )}
        </div>
      </header>
      {session && (api.renewalRefused !== null || remaining < promptBefore) && (
        <section class="renew" aria-label="Session ending">
          <p>
            Your session ends in {formatDuration(Math.max(0, remaining))}
            {api.renewalRefused !== null ? `: the node will not renew it (${api.renewalRefused})` : ": it could not be renewed"}. The
            console keeps only the token, never the secret: enter the secret again to continue.
          </p>
          <SignIn clientId={session.clientId} onDone={() => setTick((n) => n + 1)} />
        </section>
      )}
      <main id="main" tabIndex={-1}>
        {page}
      </main>
    </div>
  );
}

function route(path: string, query: URLSearchParams) {
  let params: Record<string, string> | null;
  if (path === "/") return <Overview />;
  if (path === "/topics") return <Topics />;
  if ((params = match("/topics/:topic", path))) return <TopicDetail name={params.topic} />;
  if (path === "/messages") return <Messages topic={query.get("topic") ?? ""} />;
  if (path === "/schemas") return <Schemas />;
  if ((params = match("/schemas/:subject", path))) return <SchemaDetail name={params.subject} />;
  if (path === "/groups") return <Groups />;
  if ((params = match("/groups/:group", path))) return <GroupDetail name={params.group} />;
  if (path === "/subscriptions") return <Subscriptions />;
  if ((params = match("/subscriptions/:sub", path))) return <SubscriptionDetail name={params.sub} />;
  if (path === "/cluster") return <ClusterPage />;
  if (path === "/security") return <Security />;
  return (
    <>
      <h1>Not found</h1>
      <p>
        The console has no page at {path}. <Link href="/">Back to the overview</Link>
      </p>
    </>
  );
}

function SignIn(props: { clientId?: string; onDone: () => void }) {
  const [clientId, setClientId] = useState(props.clientId ?? "");
  const [secret, setSecret] = useState("");
  const [busy, error, act] = useAction();
  return (
    <form
      class="sign-in"
      aria-label="Sign in"
      onSubmit={(event) => {
        event.preventDefault();
        act(async () => {
          await api.signIn(clientId, secret);
          // The secret leaves the page's state as soon as it was exchanged.
          setSecret("");
          props.onDone();
        });
      }}
    >
      <Field label="Client id">
        {(id) => <input id={id} name="client_id" autocomplete="username" required value={clientId} onInput={(e) => setClientId(e.currentTarget.value)} />}
      </Field>
      <Field label="Client secret">
        {(id) => (
          <input id={id} name="client_secret" type="password" autocomplete="current-password" required value={secret} onInput={(e) => setSecret(e.currentTarget.value)} />
        )}
      </Field>
      <button type="submit" disabled={busy}>
        Sign in
      </button>
      <ErrorText error={error} />
    </form>
  );
}
