// Settings → Checks: the same checks as `keyhaven doctor` (keyring, listeners, the local CA in
// each trust store, each client's routing, Cursor's HTTP/2 setting, each provider with its key),
// run on demand because the provider checks send one small request each.
import { useState } from "preact/hooks";
import { api, type DoctorCheck, type DoctorReport, type DoctorStatus } from "../ipc";
import { ErrorNotice, useAction } from "../ui";

const MARK: Record<DoctorStatus, string> = { ok: "✓", warn: "!", fail: "✗", skip: "–" };

/** One line per status for the summary: "2 failed, 1 warning, 6 passed". */
export function doctorSummary(r: DoctorReport): string {
  const count = (s: DoctorStatus) => r.checks.filter((c) => c.status === s).length;
  const parts = [
    count("fail") && `${count("fail")} failed`,
    count("warn") && `${count("warn")} warning${count("warn") === 1 ? "" : "s"}`,
    `${count("ok")} passed`,
  ].filter(Boolean);
  return parts.join(", ");
}

function Check({ c }: { c: DoctorCheck }) {
  return (
    <li class={`doctor-${c.status}`}>
      <span aria-label={c.status}>{MARK[c.status]}</span> <strong>{c.title}</strong>: {c.detail}
      {c.fix && <div class="hint">What to do: {c.fix}</div>}
    </li>
  );
}

export function DoctorSection() {
  const [report, setReport] = useState<DoctorReport>();
  const act = useAction();
  const run = async () => {
    const r = await act.run(() => api().doctor());
    if (r) setReport(r);
  };
  return (
    <div class="panel" id="doctor">
      <h2>Checks</h2>
      <p class="hint">
        The keyring, the listeners, the local CA in each trust store, each client's routing, Cursor's HTTP/2 setting and each provider with its
        key (one small request each). The same as <code>keyhaven doctor</code>.
      </p>
      <button type="button" id="doctor-run" onClick={run} disabled={act.busy}>
        {act.busy ? "Checking…" : "Run checks"}
      </button>
      {act.error && <ErrorNotice error={act.error} />}
      {report && (
        <>
          <div class={`notice ${report.ok ? "ok" : "error"}`} role="status">
            {doctorSummary(report)}
          </div>
          <ul class="doctor">
            {report.checks.map((c) => (
              <Check c={c} />
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
