# CMD in shell form: /bin/sh is the first process.
FROM node:24-slim
WORKDIR /app
COPY . .
RUN npm ci
EXPOSE 3000
CMD node server.js
