# The server is the first process, in exec form; earlier stages do not count.
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN go build -o /web ./cmd/web
CMD go test ./...

FROM gcr.io/distroless/static
COPY --from=build /web /web
ENTRYPOINT ["/web"]
CMD ["--listen=:8080"]
