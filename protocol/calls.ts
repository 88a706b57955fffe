import { z } from 'zod';

// The agent's calls as stored (machine version 10): their ids, their two ratings, and the results.

/** The model's own rating of a call's risk; `UNKNOWN` when the call had none. */
export const SecurityRisk = z.enum(['LOW', 'MEDIUM', 'HIGH', 'UNKNOWN']);
export type SecurityRisk = z.infer<typeof SecurityRisk>;

export const callId = z
  .string()
  .optional()
  .describe(
    "The tool call's id as the model gave it (absent in logs before machine version 10: the model was sent `call_<id>`).",
  );

/** The two ratings of an agent call that acts, and what confirmation mode does with it, decided when it was stored. */
export const ratings = {
  risk: z
    .enum(['low', 'high'])
    .optional()
    .describe(
      "The rules' rating (docs/security.md): the floor of the call's risk. Only shell commands can be rated high.",
    ),
  security_risk: SecurityRisk.optional().describe(
    "The model's own rating (`security_risk` argument), `UNKNOWN` when the call had none; absent on calls that do not act (`read_file`).",
  ),
  needs_confirmation: z
    .boolean()
    .optional()
    .describe(
      'Whether the call waits for the user in confirmation mode: the higher of both ratings is HIGH, or UNKNOWN while TETHER_CONFIRM_UNKNOWN held when it was stored. Absent in logs before machine version 10 (read as `risk == "high"`).',
    ),
};

export const CommandOutputData = z.object({
  command: z.string(),
  exit_code: z.number().int().nullable().describe('null when the command did not finish.'),
  output: z.string(),
  timed_out: z.boolean(),
  truncated: z.boolean(),
  cancelled: z
    .enum(['interrupt', 'stop'])
    .optional()
    .describe(
      'The user cancelled the command while it ran (an `interrupt`, or a stop): its process group was sent SIGINT, then SIGKILL. (A command that was out when its server died is reported in `output` as `interrupted: ...`, without this field.)',
    ),
  call_id: callId,
});

export const ToolInfo = z.object({
  name: z.string(),
  description: z.string(),
  input_schema: z
    .record(z.string(), z.unknown())
    .describe("The tool's JSON Schema for its arguments, as its server gave it."),
});

export const ToolResultData = z.object({
  call_id: z.string(),
  tool: z.string(),
  output: z.string().describe('What the tool answered (text, secrets masked), or what went wrong, in words.'),
  is_error: z.boolean(),
  cancelled: z.enum(['interrupt', 'stop']).optional().describe('The user cancelled the call while it was out.'),
});
