// The Cursor update guard: every Cursor version the proxy has seen, its self-test result, and
// Retry for a version Keyhaven passes through to Cursor's servers after a failed self-test.
import { useState } from "preact/hooks";
import { api, type CursorGuardReport, type CursorVersion } from "../ipc";
import { formatTime } from "../format";
import { Empty, ErrorNotice, View, useAction, useLoad } from "../ui";

const STEP_LABEL: Record<string, string> = {
  model_list: "model list",
  text_turn: "text turn",
  tool_round: "tool round",
};

/** The self-test column: "passed", "running…", "failed at tool round: …", "not tested yet". */
export function selfTestText(v: CursorVersion): string {
  switch (v.status) {
    case "passed":
      return "passed";
    case "running":
      return "running…";
    case "untested":
      return "not tested yet";
    case "failed": {
      const step = v.failedStep ? STEP_LABEL[v.failedStep] ?? v.failedStep : "a step";
      return `failed at ${step}${v.detail ? `: ${v.detail}` : ""}`;
    }
  }
}

/** The versions that failed (Keyhaven passes them through to Cursor's servers). */
export function failedVersions(r: CursorGuardReport): CursorVersion[] {
  return r.versions.filter((v) => v.status === "failed");
}

function RetryButton({ version, onReport }: { version: string; onReport: (r: CursorGuardReport) => void }) {
  const action = useAction();
  return (
    <>
      <button
        type="button"
        disabled={action.busy}
        onClick={async () => {
          const r = await action.run(() => api().retryCursorVersion(version));
          if (r) onReport(r);
        }}
      >
        Retry
      </button>
      {action.error && <ErrorNotice error={action.error} />}
    </>
  );
}

/** The overview's notice for each failed version, with its Retry. */
export function CursorGuardBanner({ report }: { report: CursorGuardReport }) {
  const [r, setR] = useState(report);
  return (
    <>
      {failedVersions(r).map((v) => (
        <div key={v.version} class="notice warn" role="status" data-cursor-guard={v.version}>
          {v.notice} <RetryButton version={v.version} onReport={setR} /> <a href="#/cursor">Cursor versions</a>
        </div>
      ))}
    </>
  );
}

export function CursorVersions(_: { args: string[] }) {
  const [tick, setTick] = useState(0);
  const res = useLoad(() => api().cursorVersions(), [tick]);
  const [report, setReport] = useState<CursorGuardReport>();
  return (
    <View res={res}>
      {(loaded) => {
        const r = report ?? loaded;
        if (!r.available) return <Empty title="The Cursor proxy is not running.">Turn on the proxy to use Keyhaven with Cursor.</Empty>;
        return (
          <>
            <p class="muted">
              When Cursor updates, Keyhaven tests its own answers (the model list, a text turn, one tool round) against a
              scripted model. If a step fails, that Cursor version uses Cursor's own servers until you retry.{" "}
              <button type="button" onClick={() => { setReport(undefined); setTick(tick + 1); }}>
                Refresh
              </button>
            </p>
            {r.versions.length === 0 ? (
              <Empty title="No Cursor version seen yet." />
            ) : (
              <table aria-label="Cursor versions">
                <thead>
                  <tr>
                    <th scope="col">Version</th>
                    <th scope="col">First seen</th>
                    <th scope="col">Last seen</th>
                    <th scope="col">Self-test</th>
                    <th scope="col">Tested</th>
                    <th scope="col" />
                  </tr>
                </thead>
                <tbody>
                  {r.versions.map((v) => (
                    <tr key={v.version} data-status={v.status}>
                      <th scope="row">{v.version}</th>
                      <td>{formatTime(v.firstSeenMs)}</td>
                      <td>{formatTime(v.lastSeenMs)}</td>
                      <td class={v.status === "failed" ? "warn-text" : undefined}>
                        {selfTestText(v)}
                        {v.status === "failed" && <> — using Cursor's servers</>}
                      </td>
                      <td>{formatTime(v.testedMs)}</td>
                      <td>{v.status !== "running" && <RetryButton version={v.version} onReport={setReport} />}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </>
        );
      }}
    </View>
  );
}
