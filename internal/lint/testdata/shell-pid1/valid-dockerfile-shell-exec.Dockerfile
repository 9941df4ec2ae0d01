# Shell form that replaces the shell with the server.
FROM node:24-slim
CMD exec node server.js
