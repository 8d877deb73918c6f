// Socket addresses as the Gloo binding handles them: a port and a numeric
// IP for messages, an Endpoint that travels between ranks, and the
// connected sockets of this process (where Gloo's pairs are found).
#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "bootstrap/gloo/gloo_internal.hpp"

namespace hpct_gloo
{

namespace
{
const unsigned char kV4Mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
}

unsigned port_of(const sockaddr_storage &ss)
{
	if (ss.ss_family == AF_INET6)
		return ntohs(((const sockaddr_in6 &)ss).sin6_port);
	return ntohs(((const sockaddr_in &)ss).sin_port);
}

std::string ip_of(const sockaddr_storage &ss)
{
	char buf[INET6_ADDRSTRLEN] = "?";
	if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((const sockaddr_in6 &)ss).sin6_addr, buf, sizeof(buf));
	else
		inet_ntop(AF_INET, &((const sockaddr_in &)ss).sin_addr, buf, sizeof(buf));
	return buf;
}

Endpoint endpoint_of(const sockaddr_storage &ss)
{
	Endpoint e{};
	if (ss.ss_family == AF_INET6) {
		std::memcpy(e.ip, &((const sockaddr_in6 &)ss).sin6_addr, 16);
	} else {
		std::memcpy(e.ip, kV4Mapped, sizeof(kV4Mapped));
		std::memcpy(e.ip + 12, &((const sockaddr_in &)ss).sin_addr, 4);
	}
	e.port = port_of(ss);
	return e;
}

sockaddr_storage sockaddr_of(const Endpoint &e)
{
	sockaddr_storage ss{};
	if (std::memcmp(e.ip, kV4Mapped, sizeof(kV4Mapped)) == 0) {
		auto &in = (sockaddr_in &)ss;
		in.sin_family = AF_INET;
		std::memcpy(&in.sin_addr, e.ip + 12, 4);
		in.sin_port = htons((uint16_t)e.port);
	} else {
		auto &in6 = (sockaddr_in6 &)ss;
		in6.sin6_family = AF_INET6;
		std::memcpy(&in6.sin6_addr, e.ip, 16);
		in6.sin6_port = htons((uint16_t)e.port);
	}
	return ss;
}

std::string endpoint_str(const Endpoint &e)
{
	if (e == Endpoint{})
		return "nowhere: it could not connect";
	char buf[INET6_ADDRSTRLEN] = "?";
	if (std::memcmp(e.ip, kV4Mapped, sizeof(kV4Mapped)) == 0)
		inet_ntop(AF_INET, e.ip + 12, buf, sizeof(buf));
	else
		inet_ntop(AF_INET6, e.ip, buf, sizeof(buf));
	return std::string(buf) + ":" + std::to_string(e.port);
}

namespace
{
// Calls f(fd, near, far) for every connected TCP socket of this process.
template <class F> void each_socket(F f)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	while (dirent *e = readdir(d)) {
		int fd = std::atoi(e->d_name);
		if (e->d_name[0] == '.' || fd == dirfd(d))
			continue;
		sockaddr_storage l{}, r{};
		socklen_t ll = sizeof(l), rl = sizeof(r);
		if (getsockname(fd, (sockaddr *)&l, &ll) != 0 ||
		    getpeername(fd, (sockaddr *)&r, &rl) != 0 ||
		    (l.ss_family != AF_INET && l.ss_family != AF_INET6))
			continue;
		f(fd, endpoint_of(l), endpoint_of(r));
	}
	closedir(d);
}
} // namespace

Sockets connected_sockets()
{
	Sockets out;
	each_socket([&](int, const Endpoint &near, const Endpoint &far) {
		out.emplace_back(near, far);
	});
	return out;
}

Endpoint endpoint_from(const std::string &ip, unsigned port)
{
	sockaddr_storage ss{};
	auto &in = (sockaddr_in &)ss;
	auto &in6 = (sockaddr_in6 &)ss;
	if (inet_pton(AF_INET, ip.c_str(), &in.sin_addr) == 1) {
		in.sin_family = AF_INET;
		in.sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, ip.c_str(), &in6.sin6_addr) == 1) {
		in6.sin6_family = AF_INET6;
		in6.sin6_port = htons((uint16_t)port);
	} else {
		return Endpoint{};
	}
	return endpoint_of(ss);
}

std::vector<bool> hung_up(const std::vector<Endpoint> &far)
{
	std::vector<bool> gone(far.size(), true);
	each_socket([&](int fd, const Endpoint &, const Endpoint &at) {
		for (size_t i = 0; i < far.size(); i++) {
			if (!(far[i] == at))
				continue;
			pollfd p = { fd, POLLRDHUP, 0 };
			gone[i] = poll(&p, 1, 0) != 0 &&
			          (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
		}
	});
	return gone;
}

} // namespace hpct_gloo
