"""The Moldau broker: asyncio server, request handlers and coordinators."""
