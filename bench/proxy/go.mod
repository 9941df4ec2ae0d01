module github.com/closingtime-dev/closingtime/bench/proxy

go 1.26.8
