package io.jetlake.sql;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.Service;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;
import org.apache.hive.service.cli.CLIService;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.thriftserver.HiveThriftServer2;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;

/**
 * The Thrift (JDBC/ODBC) door's logins: HiveServer2's CUSTOM authentication with a NATS login
 * ({@code hive.server2.custom.authentication.class}), and the account each JDBC session reads.
 *
 * <p>The JDBC user and password are a NATS user and password (or a user JWT and its nkey seed),
 * checked by {@link NatsLogins}. The Thrift server gives each JDBC session a Spark session of its
 * own without saying whose; {@link #accountOf} finds the JDBC session behind a Spark session and
 * the account its user logged in to, for {@link AccountWalls}, which binds the session on its
 * first query.
 */
public final class JdbcDoor implements PasswdAuthenticationProvider {
  private static final Map<String, NatsLogins.Login> USERS = new ConcurrentHashMap<>();
  private static volatile SessionManager sessions;

  /** Called by Hive for each connection's login. */
  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    NatsLogins.Login login = NatsLogins.check(NatsLogins.fromPair(user, password));
    if (login.refused() != null) {
      throw new AuthenticationException(login.refused());
    }
    USERS.put(user, login);
  }

  /** Watch this Thrift server's sessions, and wall and bound their operations ({@link
   *  JdbcOperations}): called as it started, before a client connects. */
  public static void serve(HiveThriftServer2 server) throws ReflectiveOperationException {
    for (Service s : server.getServices()) {
      if (s instanceof CLIService cli) {
        JdbcOperations.install(cli.getSessionManager());
        sessions = cli.getSessionManager();
      }
    }
  }

  /**
   * The login behind a Spark session the Thrift server opened, or null when it is none of its
   * (or its JDBC session is still opening: Spark registers it after the USE of its database).
   */
  static NatsLogins.Login accountOf(SparkSession session) {
    SessionManager manager = sessions;
    if (manager == null
        || !(manager.getOperationManager() instanceof SparkSQLOperationManager operations)) {
      return null;
    }
    for (Map.Entry<SessionHandle, SparkSession> e : operations.sessionToContexts().entrySet()) {
      if (e.getValue() == session) {
        try {
          return USERS.get(manager.getSession(e.getKey()).getUserName());
        } catch (HiveSQLException gone) {
          return null;
        }
      }
    }
    return null;
  }
}
