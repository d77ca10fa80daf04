import { useEffect, useRef, useState } from "preact/hooks";
import { api, type LogLine } from "../ipc";
import { formatTime } from "../format";
import { Empty, ErrorNotice, Loading, toEngineError } from "../ui";
import type { EngineError } from "../ipc";

const LEVELS = ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"];

export function Logs(_: { args: string[] }) {
  const [lines, setLines] = useState<LogLine[]>();
  const [error, setError] = useState<EngineError>();
  const [follow, setFollow] = useState(true);
  const [level, setLevel] = useState("DEBUG");
  const last = useRef<number | undefined>(undefined);

  useEffect(() => {
    let stop = false;
    const poll = async () => {
      try {
        const got = last.current === undefined ? await api().logs({ n: 500 }) : await api().logs({ after: last.current, n: 500 });
        if (stop) return;
        if (got.length) last.current = got[got.length - 1]!.seq;
        setLines((old) => [...(old ?? []), ...got].slice(-2000));
        setError(undefined);
      } catch (e) {
        if (!stop) setError(toEngineError(e));
      }
    };
    void poll();
    const t = follow ? setInterval(poll, 2000) : undefined;
    return () => {
      stop = true;
      if (t) clearInterval(t);
    };
  }, [follow]);

  const max = LEVELS.indexOf(level);
  const shown = (lines ?? []).filter((l) => LEVELS.indexOf(l.level) <= max);
  return (
    <>
      <div class="toolbar">
        <label>
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.currentTarget.checked)} /> Follow (every 2 s)
        </label>
        <label>
          Level{" "}
          <select value={level} onChange={(e) => setLevel(e.currentTarget.value)}>
            {LEVELS.map((l) => (
              <option key={l}>{l}</option>
            ))}
          </select>
        </label>
      </div>
      {error && <ErrorNotice error={error} />}
      {lines === undefined && !error ? (
        <Loading />
      ) : shown.length === 0 ? (
        <Empty title="No log lines at this level yet." />
      ) : (
        <pre class="logs" tabIndex={0} aria-label="Log lines">
          {shown.map((l) => (
            <div key={l.seq} class={`log-${l.level.toLowerCase()}`}>
              {formatTime(l.tsMs)} {l.level.padEnd(5)} {l.target}: {l.message}
            </div>
          ))}
        </pre>
      )}
    </>
  );
}
