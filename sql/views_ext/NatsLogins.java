package io.jetlake.sql;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Logins to the SQL service's Spark Connect and JDBC doors: NATS credentials, checked by the NATS
 * server itself.
 *
 * <p>A client of those doors logs in as it would to the NATS server (a user and password, a
 * token, or a user JWT and its nkey seed), and the service checks the login by making it: the
 * {@link Checker} (the service's Python side, over py4j) connects to the server with it and asks
 * which account it landed in. The server's own rules decide (config users, nkeys, operator
 * JWTs, an auth callout), so a SQL client gets in exactly when a NATS client would, lands in the
 * same account, and a user removed or revoked is refused within {@link #TTL_NANOS}. An accepted
 * login is remembered for that long (by a digest of it), so a query's many calls cost one check.
 */
public final class NatsLogins {
  static final String NO_LOGIN = "this SQL service takes a NATS login";
  private static final long TTL_NANOS = 60_000_000_000L;
  private static final String JWT_PREFIX = "eyJ";
  private static final String SEED_PREFIX = "SU";
  private static final Map<String, Cached> ACCEPTED = new ConcurrentHashMap<>();
  private static volatile Checker checker;

  private NatsLogins() {}

  /** The service's side: log in to the NATS server, as the answer "ACCOUNT", "*ACCOUNT"
   *  (the system account) or "!why" (refused). */
  public interface Checker {
    String login(String user, String password, String token, String jwt, String seed);
  }

  /** A login as a client gives it: at most one of user+password, token, jwt+seed. */
  record Credentials(String user, String password, String token, String jwt, String seed) {
    String digest() {
      try {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        for (String part : new String[] {user, password, token, jwt, seed}) {
          sha.update(String.valueOf(part).getBytes(StandardCharsets.UTF_8));
          sha.update((byte) 0);
        }
        return HexFormat.of().formatHex(sha.digest());
      } catch (NoSuchAlgorithmException e) {
        throw new IllegalStateException(e);
      }
    }
  }

  /** Where a login landed, or why it was refused (`refused` non-null). */
  record Login(String account, boolean system, String refused) {}

  private record Cached(Login login, long until) {}

  /** Turns logins on: from now on Connect and JDBC clients need one. */
  public static void require(Checker c) {
    checker = c;
  }

  static boolean on() {
    return checker != null;
  }

  /** Connect's bearer token: "user:password", "jwt:seed", or a bare token. */
  static Credentials fromToken(String token) {
    int colon = token.indexOf(':');
    if (colon < 0) {
      return new Credentials(null, null, token, null, null);
    }
    return fromPair(token.substring(0, colon), token.substring(colon + 1));
  }

  /** JDBC's user and password: a NATS user and password, a user JWT and its seed, or (no user)
   *  a token. */
  static Credentials fromPair(String user, String password) {
    if (user == null || user.isEmpty()) {
      return new Credentials(null, null, password, null, null);
    }
    if (user.startsWith(JWT_PREFIX) && password != null && password.startsWith(SEED_PREFIX)) {
      return new Credentials(null, null, null, user, password);
    }
    return new Credentials(user, password, null, null, null);
  }

  static Login check(Credentials c) {
    String key = c.digest();
    long now = System.nanoTime();
    Cached hit = ACCEPTED.get(key);
    if (hit != null && now - hit.until() < 0) {
      return hit.login();
    }
    Checker ch = checker;
    if (ch == null) {
      return new Login(null, false, NO_LOGIN + ", and none is set up");
    }
    String answer;
    try {
      answer = ch.login(c.user(), c.password(), c.token(), c.jwt(), c.seed());
    } catch (RuntimeException e) { // py4j: the service's side gone or failing
      return new Login(null, false, "the NATS login could not be checked: " + e.getMessage());
    }
    if (answer == null || answer.isEmpty() || answer.startsWith("!")) {
      ACCEPTED.remove(key);
      return new Login(null, false, answer == null ? "refused" : answer.substring(1));
    }
    boolean system = answer.startsWith("*");
    Login login = new Login(system ? answer.substring(1) : answer, system, null);
    ACCEPTED.put(key, new Cached(login, now + TTL_NANOS));
    return login;
  }
}
