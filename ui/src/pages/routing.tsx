import type { CursorRoute, ModelRoute, RoutingMode, TabRouting } from "../ipc";
import { api } from "../ipc";
import { ErrorNotice, View, useAction, useLoad } from "../ui";

const MODES: { mode: RoutingMode; title: string; text: string }[] = [
  { mode: "local", title: "Local", text: "Cursor's model calls are answered by Keyhaven with your configured models." },
  { mode: "upstream", title: "Upstream", text: "Calls pass through to Cursor's own servers unchanged (Keyhaven only records them)." },
  {
    mode: "hybrid",
    title: "Hybrid",
    text: "You choose per configured model below: served locally or by Cursor's servers. Models Keyhaven does not know go to Cursor's servers.",
  },
];

const ROUTES: { route: CursorRoute; label: string }[] = [
  { route: "local", label: "Local (Keyhaven)" },
  { route: "upstream", label: "Upstream (Cursor)" },
];

/** The per-model choice matters only in hybrid mode. */
export function showModelRoutes(mode: RoutingMode): boolean {
  return mode === "hybrid";
}

/** "2 of 3 models run locally", for the hybrid section's heading. */
export function routeSummary(models: ModelRoute[]): string {
  const local = models.filter((m) => m.route === "local").length;
  const noun = models.length === 1 ? "model runs" : "models run";
  return `${local} of ${models.length} ${noun} locally`;
}

/** What a mode means for the configured models, shown when the per-model table is hidden. */
export function modelRoutesNote(mode: RoutingMode): string {
  return mode === "local"
    ? "In local mode Keyhaven serves every configured model; switch to hybrid to send some to Cursor's servers."
    : "In upstream mode every run goes to Cursor's servers.";
}

/** The value of the Cursor Tab select: "official" or a FIM model's name. */
export const TAB_OFFICIAL = "official";

/** What the Cursor Tab section says about the current choice. */
export function tabNote(tab: TabRouting): string {
  if (tab.model) return `Tab suggestions are answered by ${tab.model} with your key; Cursor's config still decides whether Tab is on.`;
  if (tab.fimModels.length === 0)
    return "Tab is served by Cursor. To use your own model, add a fill-in-the-middle model (fim = true) under Providers & Models.";
  return "Tab is served by Cursor (official).";
}

export function RoutingPage(_: { args: string[] }) {
  const res = useLoad(() => api().routing());
  const act = useAction();
  const setModel = (model: string, route: CursorRoute) =>
    void act.run(() => api().setModelRoute(model, { route })).then((x) => x && res.reload());
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
          <fieldset disabled={act.busy}>
            <legend>Cursor Tab</legend>
            <label>
              Cursor Tab:{" "}
              <select
                aria-label="Who answers Cursor Tab"
                value={r.tab.model ?? TAB_OFFICIAL}
                onChange={(e) => {
                  const v = (e.currentTarget as HTMLSelectElement).value;
                  void act.run(() => api().setTab({ model: v === TAB_OFFICIAL ? null : v })).then((x) => x && res.reload());
                }}
              >
                <option value={TAB_OFFICIAL}>official</option>
                {r.tab.fimModels.map((m) => (
                  <option key={m} value={m}>
                    {m}
                  </option>
                ))}
              </select>
            </label>
            <p class="muted">{tabNote(r.tab)}</p>
          </fieldset>
          {showModelRoutes(r.mode) ? (
            <fieldset disabled={act.busy}>
              <legend>Cursor runs per model ({routeSummary(r.models)})</legend>
              {r.models.length === 0 ? (
                <p class="muted">No models configured yet: add one under Providers &amp; Models.</p>
              ) : (
                <table class="table">
                  <thead>
                    <tr>
                      <th scope="col">Model</th>
                      <th scope="col">Cursor runs go to</th>
                    </tr>
                  </thead>
                  <tbody>
                    {r.models.map((m) => (
                      <tr key={m.model}>
                        <td>{m.model}</td>
                        <td>
                          <select
                            aria-label={`Where Cursor runs with ${m.model} go`}
                            value={m.route}
                            onChange={(e) => setModel(m.model, (e.currentTarget as HTMLSelectElement).value as CursorRoute)}
                          >
                            {ROUTES.map((o) => (
                              <option key={o.route} value={o.route}>
                                {o.label}
                              </option>
                            ))}
                          </select>
                        </td>
                      </tr>
                    ))}
                  </tbody>
                </table>
              )}
              <p class="muted">An upstream model's name must be one Cursor knows (add it as a model or an alias).</p>
            </fieldset>
          ) : (
            <p class="muted">{modelRoutesNote(r.mode)}</p>
          )}
        </form>
      )}
    </View>
  );
}
