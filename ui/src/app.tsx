import { useEffect, useRef, useState } from "preact/hooks";
import { Overview } from "./pages/overview";
import { Providers } from "./pages/providers";
import { RoutingPage } from "./pages/routing";
import { Calls } from "./pages/calls";
import { Prices } from "./pages/prices";
import { CaTrust } from "./pages/ca";
import { SettingsPage } from "./pages/settings";
import { Logs } from "./pages/logs";
import { Clients } from "./pages/clients";
import { Budgets } from "./pages/budgets";
import { CursorVersions } from "./pages/cursor";
import { api, inApp, isNoSession, type AppStatus } from "./ipc";
import { ErrorNotice, useAction } from "./ui";

export const ROUTES = [
  { path: "overview", label: "Overview", view: Overview },
  { path: "providers", label: "Providers & Models", view: Providers },
  { path: "clients", label: "Clients", view: Clients },
  { path: "routing", label: "Routing", view: RoutingPage },
  { path: "calls", label: "Calls", view: Calls },
  { path: "budgets", label: "Budgets", view: Budgets },
  { path: "prices", label: "Prices", view: Prices },
  { path: "cursor", label: "Cursor", view: CursorVersions },
  { path: "ca", label: "CA Trust", view: CaTrust },
  { path: "settings", label: "Settings", view: SettingsPage },
  { path: "logs", label: "Logs", view: Logs },
] as const;

/** `#/calls/abc` → ["calls", "abc"]. */
function parseHash(hash: string): string[] {
  return hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
}

export function useHash(): string[] {
  const [parts, setParts] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setParts(parseHash(location.hash));
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return parts;
}

/**
 * The app window only: the engine's state with Start / Stop. While the engine is stopped every
 * page's calls answer `unavailable`; starting it remounts the page (`onChange`).
 */
function EngineBar({ onChange }: { onChange: () => void }) {
  const [status, setStatus] = useState<AppStatus>();
  const act = useAction();
  useEffect(() => {
    let live = true;
    const poll = () => api().app().then((s) => live && setStatus(s), () => undefined);
    poll();
    const t = setInterval(poll, 3000);
    return () => {
      live = false;
      clearInterval(t);
    };
  }, []);
  if (!status) return null;
  const run = async (f: () => Promise<AppStatus>) => {
    const s = await act.run(f);
    if (s) {
      setStatus(s);
      onChange();
    }
  };
  const running = status.state === "running";
  return (
    <div class={`notice ${running ? "ok" : status.state === "error" ? "error" : "warn"} engine-bar`} role="status" data-state={status.state}>
      {running && <>Keyhaven is running on <code>{status.gatewayUrl}</code>. </>}
      {status.state === "stopped" && <>Keyhaven is stopped: clients cannot reach it and these pages cannot load. </>}
      {status.state === "error" && <>Keyhaven did not start: {status.error} </>}
      {(status.state === "starting" || status.state === "stopping") && <>Keyhaven is {status.state}… </>}
      {status.state === "stopped" && status.lastStop && status.lastStop.restored.length > 0 && (
        <>Restored: {status.lastStop.restored.join(", ")}. </>
      )}
      {running ? (
        <button type="button" disabled={act.busy} onClick={() => run(() => api().stop())}>Stop</button>
      ) : (
        <button type="button" class="primary" disabled={act.busy} onClick={() => run(() => api().start())}>Start</button>
      )}
      {act.error && <ErrorNotice error={act.error} />}
    </div>
  );
}

/** In a browser: true once the engine said this browser has no dashboard session. */
function useNoSession(app: boolean): boolean {
  const [missing, setMissing] = useState(false);
  useEffect(() => {
    if (app) return;
    api()
      .status()
      .then(
        () => setMissing(false),
        (e: unknown) => setMissing(isNoSession(e)),
      );
  }, [app]);
  return missing;
}

/** How to open the dashboard: the page holds no credential, a one-time link gives a session. */
function NoSession() {
  return (
    <div class="notice warn" role="alert">
      <strong>This browser is not signed in to Keyhaven.</strong>
      <p>
        Run <code>keyhaven dashboard</code> in a terminal on this machine and open the link it prints. Each link works
        once, within a minute; the session lasts until Keyhaven restarts or the browser is closed.
      </p>
    </div>
  );
}

export function App() {
  const [page = "overview", ...rest] = useHash();
  const route = ROUTES.find((r) => r.path === page) ?? ROUTES[0];
  const View = route.view;
  const app = inApp();
  const noSession = useNoSession(app);
  const [generation, setGeneration] = useState(0);
  const first = useRef(true);
  useEffect(() => {
    document.title = `${route.label} · Keyhaven`;
    // Move focus to the new page's content on navigation, not on the first load (there the
    // first Tab should reach the skip link and the page list).
    if (first.current) first.current = false;
    else document.getElementById("main")?.focus();
  }, [route]);
  return (
    <div class="layout">
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>
        Skip to content
      </a>
      <nav class="sidebar" aria-label="Pages">
        <div class="brand">Keyhaven</div>
        <ul>
          {ROUTES.map((r) => (
            <li key={r.path}>
              <a href={`#/${r.path}`} aria-current={r === route ? "page" : undefined}>
                {r.label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        {noSession && <NoSession />}
        {app && <EngineBar onChange={() => setGeneration((g) => g + 1)} />}
        <h1>{route.label}</h1>
        {!noSession && <View key={generation} args={rest} />}
      </main>
    </div>
  );
}
