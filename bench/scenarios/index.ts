// The scenarios, in the order they run and their rows appear.
import type { Scenario } from '../harness/scenario.ts';
import { agentStep } from './agentStep.ts';
import { append } from './append.ts';
import { cluster } from './cluster.ts';
import { coldStart } from './coldStart.ts';
import { density } from './density.ts';
import { failover } from './failover.ts';
import { fanOut } from './fanOut.ts';
import { heap } from './heap.ts';
import { history } from './history.ts';
import { read } from './read.ts';
import { rehydrate } from './rehydrate.ts';
import { resume } from './resume.ts';
import { streaming } from './streaming.ts';
import { timeTravel } from './timeTravel.ts';

export const SCENARIOS: readonly Scenario[] = [
  append,
  fanOut,
  read,
  rehydrate,
  heap,
  resume,
  density,
  coldStart,
  agentStep,
  failover,
  cluster,
  timeTravel,
  streaming,
  history,
];
