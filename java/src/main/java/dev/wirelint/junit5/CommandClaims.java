package dev.wirelint.junit5;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Under parallel execution, tests share one client and overlap in time, so
 * no marker can say which test a connection serves. This command listener
 * (the driver's {@code com.mongodb.event.CommandListener}, made by
 * reflection: the extension does not depend on the driver) sees each data
 * command on the thread that sends it, before it is sent. When its
 * connection last served another test than the thread's, it claims the
 * command's request id for the thread's test (wirelint then puts that
 * connection's operations with that test until its next claim). Spring's
 * context customizer installs it in the application's client.
 */
final class CommandClaims implements InvocationHandler {
  /** The commands wirelint analyses as data operations: the ones a claim can ride on. */
  private static final Set<String> DATA =
      Set.of("find", "insert", "update", "delete", "aggregate", "count", "distinct", "findAndModify", "bulkWrite");

  /** The test each thread runs, under parallel execution. */
  private static final ThreadLocal<Session.TestInfo> RUNNING = new ThreadLocal<>();

  /** Per connection, the id of the test it last served. */
  private final Map<Object, String> served = new ConcurrentHashMap<>();

  static void running(Session.TestInfo test) {
    if (test == null) {
      RUNNING.remove();
    } else {
      RUNNING.set(test);
    }
  }

  /** The listener, as the driver's interface, or null without the driver. */
  static Object listener(ClassLoader loader) {
    try {
      Class<?> type = Class.forName("com.mongodb.event.CommandListener", false, loader);
      return Proxy.newProxyInstance(loader, new Class<?>[] {type}, new CommandClaims());
    } catch (ClassNotFoundException e) {
      return null;
    }
  }

  @Override
  public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
    switch (method.getName()) {
      case "commandStarted" -> started(args[0]);
      case "equals" -> {
        return proxy == args[0];
      }
      case "hashCode" -> {
        return System.identityHashCode(proxy);
      }
      case "toString" -> {
        return "wirelint command claims";
      }
      default -> {}
    }
    return null;
  }

  private void started(Object event) {
    Session.TestInfo test = RUNNING.get();
    if (test == null) {
      return;
    }
    try {
      String command = (String) call(event, "getCommandName");
      if (!DATA.contains(command)) {
        return;
      }
      Object connection = call(call(event, "getConnectionDescription"), "getConnectionId");
      if (test.id().equals(served.put(connection, test.id()))) {
        return;
      }
      Session session = Session.currentOrNull();
      if (session != null) {
        session.claim((Integer) call(event, "getRequestId"), test);
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      // Never the application's problem: the test goes unnamed.
    }
  }

  private static Object call(Object target, String name) throws ReflectiveOperationException {
    return target.getClass().getMethod(name).invoke(target);
  }
}
