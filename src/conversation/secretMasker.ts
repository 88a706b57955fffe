import type { Logger } from '../logger.ts';

export const SECRET_MASK = '<secret_hidden>';

export type Masker = <T>(value: T) => T;

/**
 * Replaces every secret value with `<secret_hidden>` in every string of a
 * value (events, log fields). Longer secrets first, so one that contains
 * another is masked whole.
 */
export function secretMasker(secrets: Iterable<string>): Masker {
  const values = [...new Set(secrets)].filter((v) => v.length > 0).sort((a, b) => b.length - a.length);
  if (values.length === 0) return (value) => value;
  const maskText = (text: string) => {
    let out = text;
    for (const secret of values) if (out.includes(secret)) out = out.split(secret).join(SECRET_MASK);
    return out;
  };
  const mask = (value: unknown): unknown => {
    if (typeof value === 'string') return maskText(value);
    if (Array.isArray(value)) return value.map(mask);
    if (value !== null && typeof value === 'object') {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, mask(v)]));
    }
    return value;
  };
  return <T>(value: T) => mask(value) as T;
}

/** Log lines never carry a secret value in clear, whichever conversation it belongs to. */
export function maskingLogger(base: Logger, secrets: () => Iterable<Record<string, string>>): Logger {
  const masked = (fields?: Record<string, unknown>) => {
    if (!fields) return fields;
    const values = [...secrets()].flatMap((s) => Object.values(s));
    return values.length === 0 ? fields : secretMasker(values)(fields);
  };
  return {
    get isDebug() {
      return base.isDebug;
    },
    // Masking costs a pass over the fields: only for lines that are written.
    debug: (m, f) => {
      if (base.isDebug) base.debug(m, masked(f));
    },
    info: (m, f) => base.info(m, masked(f)),
    warn: (m, f) => base.warn(m, masked(f)),
    error: (m, f) => base.error(m, masked(f)),
  };
}
