import { describe, expect, it } from 'vitest';
import { allowedHosts, allowsHost } from '../../src/server/hostCheck.ts';

const machine = () => ({ addresses: ['10.0.0.7', 'fe80::1', '127.0.0.1'], hostname: 'MyBox' });
const noMachine = () => {
  throw new Error('the machine is asked only when listening on every interface');
};

/** Which of `hosts` the check of `allowed` lets through. */
const passing = (allowed: readonly string[], hosts: Array<string | undefined>) => hosts.filter(allowsHost(allowed));

describe('allowsHost', () => {
  it('lets loopback names and addresses through, whatever their port and case', () => {
    const loopback = [
      'localhost',
      'localhost:3000',
      'LocalHost:3000',
      'localhost.:3000',
      'app.localhost:8080',
      '127.0.0.1:3000',
      '127.1.2.3',
      '[::1]:3000',
      '[::1]',
      '[0:0:0:0:0:0:0:1]:3000',
    ];
    expect(passing([], loopback)).toEqual(loopback);
  });

  it('refuses other names, look-alikes, a missing Host and what is no host at all', () => {
    expect(
      passing(
        [],
        [
          'evil.example:3000',
          'localhost.evil.example',
          'evillocalhost',
          '127.0.0.1.evil.example',
          '128.0.0.1:3000',
          '[::2]:3000',
          '::1',
          'localhost:3000@evil.example',
          'localhost/evil',
          'localhost:99999999',
          '',
          undefined,
        ],
      ),
    ).toEqual([]);
  });

  it('lets the allowed names through by name, any port and any case, IPv6 with or without brackets', () => {
    const allows = allowsHost(['Tether.Test', '192.168.1.5', 'fd00::5', '[fd00::6]']);
    expect(
      [
        'tether.test:3000',
        'TETHER.TEST',
        '192.168.1.5:80',
        '[fd00::5]:3000',
        '[FD00:0::6]',
        'other.test',
        '192.168.1.6',
      ].map((host) => allows(host)),
    ).toEqual([true, true, true, true, true, false, false]);
  });
});

describe('allowedHosts', () => {
  it('names the listening address, and not the machine’s others, when it is one address', () => {
    const allows = allowsHost(allowedHosts('192.168.1.5', undefined, noMachine));
    expect([allows('192.168.1.5:3000'), allows('10.0.0.7:3000'), allows('mybox:3000')]).toEqual([true, false, false]);
    expect(allowsHost(allowedHosts('mybox.lan', undefined, noMachine))('MyBox.lan:3000')).toBe(true);
  });

  it('names every address of the machine and its host name when listening on every interface', () => {
    for (const wildcard of ['0.0.0.0', '::', '[::]']) {
      const allows = allowsHost(allowedHosts(wildcard, undefined, machine));
      expect(
        ['10.0.0.7:3000', '[fe80::1]:3000', 'mybox:3000', '0.0.0.0:3000', 'evil.example:3000', '10.0.0.8:3000'].map(
          (host) => allows(host),
        ),
        wildcard,
      ).toEqual([true, true, true, true, false, false]);
    }
  });

  it('names the host of the public URL, whatever its port', () => {
    const allows = allowsHost(allowedHosts('127.0.0.1', 'https://Tether.Example.com:8443', noMachine));
    expect([allows('tether.example.com'), allows('tether.example.com:3000'), allows('example.com')]).toEqual([
      true,
      true,
      false,
    ]);
  });
});
