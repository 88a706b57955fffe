/** The one event name of the Socket.IO baseline, shared by its server and its clients (which run in different processes). */
export const SOCKET_IO_EVENT = 'event';
