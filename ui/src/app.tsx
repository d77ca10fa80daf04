import { useEffect, useRef, useState } from "preact/hooks";
import { Overview } from "./pages/overview";
import { Providers } from "./pages/providers";
import { RoutingPage } from "./pages/routing";
import { Calls } from "./pages/calls";
import { CaTrust } from "./pages/ca";
import { SettingsPage } from "./pages/settings";
import { Logs } from "./pages/logs";
import { Clients } from "./pages/clients";
import { tokenFromDocument } from "./ipc";

export const ROUTES = [
  { path: "overview", label: "Overview", view: Overview },
  { path: "providers", label: "Providers & Models", view: Providers },
  { path: "clients", label: "Clients", view: Clients },
  { path: "routing", label: "Routing", view: RoutingPage },
  { path: "calls", label: "Calls", view: Calls },
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

export function App() {
  const [page = "overview", ...rest] = useHash();
  const route = ROUTES.find((r) => r.path === page) ?? ROUTES[0];
  const View = route.view;
  const noToken = !tokenFromDocument();
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
        {noToken && (
          <div class="notice warn" role="alert">
            No control token on this page. Open the dashboard from the URL that <code>keyhaven dashboard</code> prints, with
            <code> [server] ui_dir</code> set, so the engine can inject it.
          </div>
        )}
        <h1>{route.label}</h1>
        <View args={rest} />
      </main>
    </div>
  );
}
