import { z } from 'zod';

/**
 * Between a server's name and its tool's in the names offered to the LLM
 * (`<server>__<tool>`): a server name never holds it, so the first one splits.
 */
export const MCP_TOOL_SEPARATOR = '__';

const MAX_NAME_LENGTH = 40;

/** A program the server starts, outside the agent's sandbox, for each conversation. */
const McpStdioServer = z.strictObject({
  command: z.string({ error: 'give a command to run (or a url)' }).min(1, 'give a non-empty command'),
  args: z.array(z.string({ error: 'use strings in args' }), { error: 'use an array of strings' }).default([]),
  env: z
    .record(z.string(), z.string({ error: 'use string values in env' }), { error: 'use an object of strings' })
    .superRefine((env, ctx) => {
      for (const name of Object.keys(env)) {
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) {
          ctx.addIssue({
            code: 'custom',
            message: 'use variable names of letters, digits and underscores',
            path: [name],
          });
        }
      }
    })
    .default({}),
});

/** A server reached over streamable HTTP. */
const McpHttpServer = z.strictObject({
  url: z.url({ protocol: /^https?$/, error: 'use an http or https URL' }),
});

export type McpStdioServer = z.infer<typeof McpStdioServer>;
export type McpHttpServer = z.infer<typeof McpHttpServer>;
export type McpServerConfig = McpStdioServer | McpHttpServer;

/**
 * One server: its `url` says which kind it is. Dispatching on it (rather
 * than a union) keeps the messages about the kind the operator meant.
 */
const McpServerSetting = z
  .looseObject({}, { error: 'use an object with a command or a url' })
  .transform((value, ctx): McpServerConfig => {
    const parsed = ('url' in value ? McpHttpServer : McpStdioServer).safeParse(value);
    if (parsed.success) return parsed.data;
    for (const issue of parsed.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    return z.NEVER;
  });

function nameProblem(name: string): string | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(name)) return 'use letters, digits, dashes and underscores in a server name';
  if (name.includes(MCP_TOOL_SEPARATOR)) return `a server name must not hold "${MCP_TOOL_SEPARATOR}"`;
  // `<server>__<tool>` is split at the first `__`: a server name ending in `_` would be read short.
  if (name.endsWith('_')) return 'a server name must not end with "_"';
  if (name.length > MAX_NAME_LENGTH) return `use at most ${MAX_NAME_LENGTH} characters in a server name`;
  return undefined;
}

/** Every configured MCP server by name, in the order of the setting. */
export type McpServers = Record<string, McpServerConfig>;

/**
 * `TETHER_MCP_SERVERS` as the environment gives it: a JSON object
 * `{"<name>": {"command", "args"?, "env"?} | {"url"}}`; absent or blank is none.
 * Issues carry the path of what is wrong (`fs.command`), under the variable's
 * name when this sits in the config's object schema.
 */
export const McpServersSetting = z
  .string()
  .optional()
  .transform((text, ctx): unknown => {
    if (text === undefined || text.trim() === '') return {};
    try {
      return JSON.parse(text);
    } catch (error) {
      ctx.addIssue({ code: 'custom', message: `use a JSON object (${(error as Error).message})` });
      return z.NEVER;
    }
  })
  .pipe(
    z
      .record(z.string(), McpServerSetting, { error: 'use a JSON object of servers by name' })
      .superRefine((servers, ctx) => {
        for (const name of Object.keys(servers)) {
          const problem = nameProblem(name);
          if (problem) ctx.addIssue({ code: 'custom', message: problem, path: [name] });
        }
      }),
  );
