# tini forwards signals to the server, which it starts itself.
FROM node:24-slim
CMD ["node", "server.js"]
ENTRYPOINT ["tini", "--"]
