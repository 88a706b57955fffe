/**
 * Session machine version → sha256 of the machine's definition and the source
 * of machines/ at that version (test/machines/machineVersion.unit.test.ts).
 * Add a line with every version bump; never change or remove one: an old
 * version's entry is what its stored logs and snapshots were written under.
 * Versions up to 3 predate this table.
 */
export const MACHINE_VERSION_HASHES: Readonly<Record<number, string>> = {
  4: '929b8304618eadb42273fac2f60ba0fd9dee72d48ea774e6a2b556f52b234855',
  5: '689f9ccd54eda7ddbe10db3ad00980d2965a014bc3f978a230310857837c104e',
  6: '0050422d048351d0f4d7ac619653f9cd4f14869b4bbb93bb9a3dfe5075bb4308',
  7: 'b0df0959b6446e6aeb60b36280849e9f01212c3fb352a441655f9a30b4edd74b',
  8: 'a08758ff993cc6694790b6b2f3330ff2fb960d2c68d05f0a3b0da5ecad248307',
  9: '0a20f245eb440e83737de006cebd6e75e3ed0b7df9e7f3834403e4803bdd4e65',
  10: '41cd1cb44fbdfad93ecf6450aca645171be8f925b5d707ed6965bdf87f37095d',
};
