import type { RoutingMode } from "../ipc";
import { api } from "../ipc";
import { ErrorNotice, View, useAction, useLoad } from "../ui";

const MODES: { mode: RoutingMode; title: string; text: string }[] = [
  { mode: "local", title: "Local", text: "Cursor's model calls are answered by Keyhaven with your configured models." },
  { mode: "upstream", title: "Upstream", text: "Calls pass through to Cursor's own servers unchanged (Keyhaven only records them)." },
  { mode: "hybrid", title: "Hybrid", text: "Models you configured are served locally; everything else goes upstream." },
];

export function RoutingPage(_: { args: string[] }) {
  const res = useLoad(() => api().routing());
  const act = useAction();
  return (
    <View res={res}>
      {(r) => (
        <form onSubmit={(e) => e.preventDefault()}>
          <fieldset disabled={act.busy}>
            <legend>How the intercepting proxy routes Cursor's calls</legend>
            {MODES.map((m) => (
              <label class="radio" key={m.mode}>
                <input
                  type="radio"
                  name="mode"
                  value={m.mode}
                  checked={r.mode === m.mode}
                  onChange={() => void act.run(() => api().setRouting({ mode: m.mode })).then((x) => x && res.reload())}
                />
                <span>
                  <strong>{m.title}</strong> — {m.text}
                </span>
              </label>
            ))}
          </fieldset>
          {act.error && <ErrorNotice error={act.error} />}
          <p class="muted">
            {r.proxyRunning
              ? "The proxy is running; changes apply to new connections."
              : "The proxy is not running: the mode is saved and used when it starts (enable it in Settings)."}
          </p>
        </form>
      )}
    </View>
  );
}
